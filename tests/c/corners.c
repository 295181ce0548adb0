/* Corners of MPI's semantics that MPICH's own test suite checks: the status MPI_Request_get_status
 * gives of a completed request; a persistent request whose derived datatype the program freed;
 * MPI_PROC_NULL as the target of every one-sided operation, of a lock epoch and of
 * MPI_Win_shared_query;
 * one-sided operations of no elements; MPI_WIN_BASE of a window of no memory (null); a put across two
 * attached regions of a dynamic window that follow each other in memory; the null base of a
 * shared window's empty part; MPI_Comm_create with disjoint groups; an empty
 * group being MPI_GROUP_EMPTY; MPI_Ialltoall in place with a send count and type it must not
 * look at; MPI-3's MPI_Count forms and the status setters; the error field of a status MPI_Recv
 * and MPI_Wait leave alone; MPI_COMM_SELF's attributes deleted at MPI_Finalize, the last set
 * first. Printed as "rank: what = values" lines; the test compares them with MPICH's. */
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "say.h"

static void request_status(void)
{
    /* A message whose synchronous send returned has reached its receive. */
    int buf[2] = {0, 0}, flag = -1, count = -1;
    MPI_Request req = MPI_REQUEST_NULL;
    MPI_Status st;
    if (rank == size - 1)
        MPI_Irecv(buf, 2, MPI_INT, 0, 10, MPI_COMM_WORLD, &req);
    if (rank == 0) {
        int out[2] = {size, 3};
        MPI_Ssend(out, 2, MPI_INT, size - 1, 10, MPI_COMM_WORLD);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == size - 1) {
        st.MPI_SOURCE = st.MPI_TAG = -1;
        MPI_Request_get_status(req, &flag, &st);
        MPI_Get_count(&st, MPI_INT, &count);
        SAY("get_status = flag %d source %d tag %d count %d, request kept %d", flag, st.MPI_SOURCE, st.MPI_TAG, count,
            req != MPI_REQUEST_NULL);
        MPI_Wait(&req, &st);
        SAY("wait after get_status = %d %d %d %d", st.MPI_SOURCE, st.MPI_TAG, buf[0], buf[1]);
    }
    MPI_Request_get_status(MPI_REQUEST_NULL, &flag, &st);
    SAY("get_status of null = flag %d source %d tag %d", flag, st.MPI_SOURCE == MPI_ANY_SOURCE,
        st.MPI_TAG == MPI_ANY_TAG);

    /* A receive nobody sends to: not complete, and polling it does not hang. */
    int none;
    MPI_Irecv(&none, 1, MPI_INT, rank, 99, MPI_COMM_WORLD, &req);
    MPI_Request_get_status(req, &flag, MPI_STATUS_IGNORE);
    SAY("get_status pending = %d", flag);
    MPI_Send(&rank, 1, MPI_INT, rank, 99, MPI_COMM_WORLD);
    do
        MPI_Request_get_status(req, &flag, &st);
    while (!flag);
    SAY("get_status later = %d %d", flag, st.MPI_TAG);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
}

static void persistent_with_freed_type(void)
{
    /* Every other int, the type freed right after the requests are made; another type made
     * then may take its handle. */
    MPI_Datatype strided, other;
    MPI_Type_vector(3, 1, 2, MPI_INT, &strided);
    MPI_Type_commit(&strided);
    int src[6], dst[6];
    for (int i = 0; i < 6; i++) {
        src[i] = rank * 10 + i;
        dst[i] = -1;
    }
    int to = (rank + 1) % size, from = (rank + size - 1) % size;
    MPI_Request reqs[2];
    MPI_Send_init(src, 1, strided, to, 3, MPI_COMM_WORLD, &reqs[0]);
    MPI_Recv_init(dst, 1, strided, from, 3, MPI_COMM_WORLD, &reqs[1]);
    MPI_Type_free(&strided);
    MPI_Type_contiguous(5, MPI_CHAR, &other);
    MPI_Type_commit(&other);
    for (int round = 0; round < 2; round++) {
        MPI_Startall(2, reqs);
        MPI_Waitall(2, reqs, MPI_STATUSES_IGNORE);
        SAY("persistent round %d = %d %d %d %d %d %d", round, dst[0], dst[1], dst[2], dst[3], dst[4], dst[5]);
        src[0] += 100;
    }
    MPI_Request_free(&reqs[0]);
    MPI_Request_free(&reqs[1]);
    MPI_Type_free(&other);
}

static void one_sided_to_nobody(void)
{
    int mem[4] = {1, 2, 3, 4}, origin[4] = {9, 9, 9, 9}, result[4] = {7, 7, 7, 7}, one = 1, cmp = 1;
    MPI_Win win;
    MPI_Win_create(mem, sizeof mem, sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &win);
    MPI_Win_fence(0, win);
    int rc = MPI_Put(origin, 4, MPI_INT, MPI_PROC_NULL, 0, 4, MPI_INT, win);
    rc |= MPI_Get(result, 4, MPI_INT, MPI_PROC_NULL, 0, 4, MPI_INT, win);
    rc |= MPI_Accumulate(origin, 4, MPI_INT, MPI_PROC_NULL, 0, 4, MPI_INT, MPI_SUM, win);
    rc |= MPI_Get_accumulate(origin, 1, MPI_INT, result, 1, MPI_INT, MPI_PROC_NULL, 0, 1, MPI_INT, MPI_SUM, win);
    rc |= MPI_Fetch_and_op(&one, result, MPI_INT, MPI_PROC_NULL, 0, MPI_SUM, win);
    rc |= MPI_Compare_and_swap(&one, &cmp, result, MPI_INT, MPI_PROC_NULL, 0, win);
    MPI_Win_fence(0, win);
    SAY("to proc_null = rc %d mem %d %d %d %d result %d %d", rc, mem[0], mem[1], mem[2], mem[3], result[0], result[3]);

    /* Request-based, in a passive epoch. */
    MPI_Request r[2];
    MPI_Win_lock_all(0, win);
    rc = MPI_Rput(origin, 4, MPI_INT, MPI_PROC_NULL, 0, 4, MPI_INT, win, &r[0]);
    rc |= MPI_Rget_accumulate(origin, 1, MPI_INT, result, 1, MPI_INT, MPI_PROC_NULL, 0, 1, MPI_INT, MPI_SUM, win,
                              &r[1]);
    MPI_Waitall(2, r, MPI_STATUSES_IGNORE);
    MPI_Win_unlock_all(win);
    SAY("requests to proc_null = rc %d result %d nulled %d", rc, result[0],
        r[0] == MPI_REQUEST_NULL && r[1] == MPI_REQUEST_NULL);

    /* A lock epoch of MPI_PROC_NULL, flushed, in which operations go nowhere. */
    rc = MPI_Win_lock(MPI_LOCK_EXCLUSIVE, MPI_PROC_NULL, 0, win);
    rc |= MPI_Put(origin, 4, MPI_INT, MPI_PROC_NULL, 0, 4, MPI_INT, win);
    rc |= MPI_Win_flush(MPI_PROC_NULL, win);
    rc |= MPI_Fetch_and_op(&one, result, MPI_INT, MPI_PROC_NULL, 0, MPI_SUM, win);
    rc |= MPI_Win_flush_local(MPI_PROC_NULL, win);
    rc |= MPI_Win_unlock(MPI_PROC_NULL, win);
    SAY("lock of proc_null = rc %d mem %d %d result %d", rc, mem[0], mem[3], result[0]);
    MPI_Win_free(&win);
}

static void one_sided_edges(void)
{
    /* Operations of no elements, to another rank: nothing happens, nothing hangs. */
    int mem[4] = {1, 2, 3, 4}, r[4] = {5, 5, 5, 5}, peer = (rank + 1) % size;
    MPI_Win win;
    MPI_Win_create(mem, sizeof mem, sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &win);
    MPI_Win_fence(0, win);
    int rc = MPI_Get(r, 0, MPI_INT, peer, 0, 0, MPI_INT, win);
    MPI_Win_fence(0, win);
    rc |= MPI_Put(r, 0, MPI_INT, peer, 0, 0, MPI_INT, win);
    rc |= MPI_Accumulate(r, 0, MPI_INT, peer, 0, 0, MPI_INT, MPI_SUM, win);
    MPI_Win_fence(0, win);
    rc |= MPI_Get_accumulate(r, 0, MPI_INT, r, 0, MPI_INT, peer, 0, 0, MPI_INT, MPI_SUM, win);
    MPI_Win_fence(0, win);
    SAY("zero-element operations = rc %d mem %d %d r %d", rc, mem[0], mem[3], r[0]);
    MPI_Win_free(&win);

    /* MPI_WIN_BASE of windows of no memory: null, whatever pointer the program gave. */
    void *base;
    int flag;
    MPI_Win_create(NULL, 0, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win);
    MPI_Win_get_attr(win, MPI_WIN_BASE, &base, &flag);
    SAY("empty window base = %d %d", flag, base == NULL);
    MPI_Win_free(&win);
    MPI_Win_create(mem, 0, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win);
    MPI_Win_get_attr(win, MPI_WIN_BASE, &base, &flag);
    SAY("empty window of a pointer = %d %d", flag, base == NULL);
    MPI_Win_free(&win);

    /* A dynamic window of two regions that follow each other in memory: one put across
     * both. */
    int *region = (int *)calloc(8, sizeof(int));
    int across[4] = {rank + 10, rank + 11, rank + 12, rank + 13};
    MPI_Win_create_dynamic(MPI_INFO_NULL, MPI_COMM_WORLD, &win);
    MPI_Win_attach(win, region, 4 * sizeof(int));
    MPI_Win_attach(win, region + 4, 4 * sizeof(int));
    MPI_Aint mine, theirs;
    MPI_Get_address(region + 2, &mine);
    MPI_Sendrecv(&mine, 1, MPI_AINT, (rank + size - 1) % size, 8, &theirs, 1, MPI_AINT, peer, 8, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
    MPI_Win_fence(0, win);
    rc = MPI_Put(across, 4, MPI_INT, peer, theirs, 4, MPI_INT, win);
    MPI_Win_fence(0, win);
    SAY("put across regions = rc %d: %d %d %d %d %d %d", rc, region[1], region[2], region[3], region[4], region[5],
        region[6]);
    MPI_Win_detach(win, region);
    MPI_Win_detach(win, region + 4);
    MPI_Win_free(&win);
    free(region);
}

static void shared_parts(void)
{
    /* Odd ranks have no memory in the window. */
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    int nrank, nsize;
    MPI_Comm_rank(node, &nrank);
    MPI_Comm_size(node, &nsize);
    int *base;
    MPI_Win win;
    MPI_Win_allocate_shared(nrank % 2 ? 0 : 4 * sizeof(int), sizeof(int), MPI_INFO_NULL, node, &base, &win);
    MPI_Win_fence(0, win);
    if (nrank % 2 == 0)
        for (int i = 0; i < 4; i++)
            base[i] = nrank * 10 + i;
    MPI_Win_fence(0, win);
    int bad = 0;
    for (int r = 0; r < nsize; r++) {
        MPI_Aint sz;
        int unit, *p;
        MPI_Win_shared_query(win, r, &sz, &unit, &p);
        if (r % 2 ? sz != 0 || p != NULL : sz != 4 * sizeof(int) || p[3] != r * 10 + 3)
            bad++;
    }
    MPI_Aint sz;
    int unit, *p;
    MPI_Win_shared_query(win, MPI_PROC_NULL, &sz, &unit, &p);
    SAY("shared parts = bad %d, proc_null size %ld unit %d first %d", bad, (long)sz, unit, p ? p[0] : -1);
    MPI_Win_free(&win);
    MPI_Comm_free(&node);
}

static void groups(void)
{
    MPI_Group world, odd, even, empty;
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    int all[64], odds[32], evens[32], no = 0, ne = 0;
    for (int i = 0; i < size; i++) {
        all[i] = i;
        if (i % 2)
            odds[no++] = i;
        else
            evens[ne++] = i;
    }
    MPI_Group_excl(world, size, all, &empty);
    SAY("excl all = %d", empty == MPI_GROUP_EMPTY);
    MPI_Group_free(&empty);
    SAY("freed empty = %d", empty == MPI_GROUP_NULL);

    /* Each rank passes its own half: one call, a communicator of each half. */
    MPI_Group_incl(world, no, odds, &odd);
    MPI_Group_incl(world, ne, evens, &even);
    MPI_Comm half;
    MPI_Comm_create(MPI_COMM_WORLD, rank % 2 ? odd : even, &half);
    int hrank, hsize, sum;
    MPI_Comm_rank(half, &hrank);
    MPI_Comm_size(half, &hsize);
    MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, half);
    SAY("disjoint create = rank %d size %d sum %d", hrank, hsize, sum);
    MPI_Comm_free(&half);
    MPI_Group_free(&odd);
    MPI_Group_free(&even);
    MPI_Group_free(&world);
}

static void alltoall_in_place(void)
{
    int buf[64];
    for (int i = 0; i < size; i++)
        buf[i] = rank * 100 + i;
    MPI_Request req;
    MPI_Ialltoall(MPI_IN_PLACE, -1, MPI_DATATYPE_NULL, buf, 1, MPI_INT, MPI_COMM_WORLD, &req);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
    SAY("ialltoall in place = %d %d", buf[0], buf[size - 1]);
}

static void counts(void)
{
    MPI_Datatype vec, wide, three;
    MPI_Type_vector(3, 2, 5, MPI_DOUBLE, &vec);
    MPI_Type_create_resized(vec, -16, 200, &wide);
    MPI_Type_contiguous(3, MPI_INT, &three);
    MPI_Type_commit(&three);
    MPI_Count size, lb, extent, tlb, textent;
    MPI_Type_size_x(wide, &size);
    MPI_Type_get_extent_x(wide, &lb, &extent);
    MPI_Type_get_true_extent_x(wide, &tlb, &textent);
    SAY("count forms = size %lld lb %lld extent %lld true %lld %lld", size, lb, extent, tlb, textent);

    /* A status filled in by the program, read back by the usual calls. */
    MPI_Status st;
    memset(&st, 0, sizeof st);
    int n, e;
    MPI_Count ex;
    /* Of a predefined type (for a derived one MPICH counts whole elements of the type,
     * where MPI-3.1 13.3 says basic elements, which mpr counts). */
    MPI_Status_set_elements(&st, MPI_INT, 6);
    MPI_Get_count(&st, three, &n);
    MPI_Get_elements(&st, three, &e);
    MPI_Get_elements_x(&st, MPI_INT, &ex);
    SAY("set elements = count %d elements %d ints %lld", n, e, ex);
    MPI_Status_set_elements(&st, MPI_INT, 7);
    MPI_Get_count(&st, three, &n);
    MPI_Get_elements(&st, three, &e);
    SAY("set partial elements = count %d elements %d", n == MPI_UNDEFINED, e);
    MPI_Status_set_elements_x(&st, MPI_BYTE, 3000000000LL);
    MPI_Get_elements_x(&st, MPI_BYTE, &ex);
    MPI_Get_count(&st, MPI_BYTE, &n);
    int cancelled;
    MPI_Status_set_cancelled(&st, 1);
    MPI_Test_cancelled(&st, &cancelled);
    MPI_Count after;
    MPI_Get_elements_x(&st, MPI_BYTE, &after);
    SAY("large count = %lld count %d cancelled %d kept %d", ex, n == MPI_UNDEFINED, cancelled, after == ex);
    MPI_Status_set_cancelled(&st, 0);
    MPI_Test_cancelled(&st, &cancelled);
    SAY("uncancelled = %d", cancelled);
    MPI_Type_free(&vec);
    MPI_Type_free(&wide);
    MPI_Type_free(&three);
}

static int delete_order[8], deletes;

static int note_delete(MPI_Comm comm, int keyval, void *value, void *extra)
{
    (void)comm;
    (void)keyval;
    (void)extra;
    delete_order[deletes++] = *(int *)value;
    return MPI_SUCCESS;
}

/* The error field of a status: MPI_Recv and MPI_Wait leave it as it was (MPI-3.1 section
 * 3.2.5: only the calls that return many statuses set it; MPICH's pt2pt/mprobe checks it). */
static void status_error_field(void)
{
    int next = (rank + 1) % size, prev = (rank + size - 1) % size, v = rank, got = -1;
    MPI_Status b, c, d;
    b.MPI_ERROR = MPI_ERR_TOPOLOGY;
    c.MPI_ERROR = MPI_ERR_ARG;
    d.MPI_ERROR = MPI_ERR_TAG;
    MPI_Request sent, recvd;
    MPI_Isend(&v, 1, MPI_INT, next, 41, MPI_COMM_WORLD, &sent);
    MPI_Recv(&got, 1, MPI_INT, prev, 41, MPI_COMM_WORLD, &b);
    MPI_Wait(&sent, &c);
    MPI_Irecv(&got, 1, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD, &recvd);
    MPI_Wait(&recvd, &d);
    SAY("status error fields kept = %d %d %d, source %d", b.MPI_ERROR == MPI_ERR_TOPOLOGY, c.MPI_ERROR == MPI_ERR_ARG,
        d.MPI_ERROR == MPI_ERR_TAG, b.MPI_SOURCE);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    request_status();
    persistent_with_freed_type();
    one_sided_to_nobody();
    one_sided_edges();
    shared_parts();
    groups();
    alltoall_in_place();
    counts();
    status_error_field();

    /* Set in the order 3, 1, 4, 2: deleted at MPI_Finalize as 2, 4, 1, 3. */
    static int values[4] = {3, 1, 4, 2};
    for (int i = 0; i < 4; i++) {
        int key;
        MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, note_delete, &key, NULL);
        MPI_Comm_set_attr(MPI_COMM_SELF, key, &values[i]);
        MPI_Comm_free_keyval(&key);
    }
    MPI_Finalize();
    SAY("self attributes deleted = %d: %d %d %d %d", deletes, delete_order[0], delete_order[1], delete_order[2],
        delete_order[3]);
    return 0;
}
