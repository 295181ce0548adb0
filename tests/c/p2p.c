/* The C ABI's requests: nonblocking, synchronous, ready and buffered sends, persistent
 * requests, the Wait/Test family, MPI_PROC_NULL and null requests, generalized requests (one
 * completed by another thread), and the errors requests report, printed as "rank: what =
 * value" lines. The test builds it with mprcc and with
 * MPICH's mpicc and runs each with 3 and 4 ranks: the outputs, sorted, must be the same. */
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "say.h"

#define BIG 100000 /* ints: large enough for a rendezvous on every transport */

static int class_of(int code)
{
    int c;
    MPI_Error_class(code, &c);
    return c;
}

/* Sum of a buffer filled by fill(). */
static long check(const int *b, int n, int seed)
{
    long bad = 0;
    for (int i = 0; i < n; i++)
        bad += b[i] != seed * 7 + i;
    return bad;
}

static void fill(int *b, int n, int seed)
{
    for (int i = 0; i < n; i++)
        b[i] = seed * 7 + i;
}

static void nonblocking(void)
{
    int next = (rank + 1) % size, prev = (rank + size - 1) % size, count;
    int *out = (int *)malloc(BIG * sizeof(int)), *in = (int *)malloc(BIG * sizeof(int));
    int small_out = rank * 3, small_in = -1;
    MPI_Request reqs[4];
    MPI_Status sts[4];
    fill(out, BIG, rank);
    MPI_Irecv(in, BIG, MPI_INT, prev, 1, MPI_COMM_WORLD, &reqs[0]);
    MPI_Irecv(&small_in, 1, MPI_INT, MPI_ANY_SOURCE, 2, MPI_COMM_WORLD, &reqs[1]);
    MPI_Isend(out, BIG, MPI_INT, next, 1, MPI_COMM_WORLD, &reqs[2]);
    MPI_Isend(&small_out, 1, MPI_INT, next, 2, MPI_COMM_WORLD, &reqs[3]);
    MPI_Waitall(4, reqs, sts);
    MPI_Get_count(&sts[0], MPI_INT, &count);
    SAY("ring big: from %d tag %d count %d bad %ld", sts[0].MPI_SOURCE, sts[0].MPI_TAG, count, check(in, BIG, prev));
    MPI_Get_elements(&sts[1], MPI_INT, &count);
    SAY("ring small: from %d value %d elements %d", sts[1].MPI_SOURCE, small_in, count);
    SAY("requests null after waitall = %d", reqs[0] == MPI_REQUEST_NULL && reqs[1] == MPI_REQUEST_NULL &&
                                                 reqs[2] == MPI_REQUEST_NULL && reqs[3] == MPI_REQUEST_NULL);

    /* Test until done, one request at a time. */
    int flag = 0;
    MPI_Irecv(in, BIG, MPI_INT, next, 3, MPI_COMM_WORLD, &reqs[0]);
    MPI_Isend(out, BIG, MPI_INT, prev, 3, MPI_COMM_WORLD, &reqs[1]);
    while (!flag)
        MPI_Test(&reqs[0], &flag, &sts[0]);
    MPI_Wait(&reqs[1], MPI_STATUS_IGNORE);
    SAY("test loop: from %d bad %ld null %d", sts[0].MPI_SOURCE, check(in, BIG, next), reqs[0] == MPI_REQUEST_NULL);

    /* Testall: all or nothing. */
    MPI_Irecv(&small_in, 1, MPI_INT, prev, 4, MPI_COMM_WORLD, &reqs[0]);
    MPI_Isend(&small_out, 1, MPI_INT, next, 4, MPI_COMM_WORLD, &reqs[1]);
    flag = 0;
    while (!flag)
        MPI_Testall(2, reqs, &flag, MPI_STATUSES_IGNORE);
    SAY("testall: value %d", small_in);

    /* From and to MPI_PROC_NULL: complete at once, the status says so. */
    MPI_Irecv(in, 5, MPI_INT, MPI_PROC_NULL, 5, MPI_COMM_WORLD, &reqs[0]);
    MPI_Isend(out, 5, MPI_INT, MPI_PROC_NULL, 5, MPI_COMM_WORLD, &reqs[1]);
    MPI_Wait(&reqs[0], &sts[0]);
    MPI_Wait(&reqs[1], MPI_STATUS_IGNORE);
    /* (MPICH reports source 0 and tag 0 here, the standard MPI_PROC_NULL and MPI_ANY_TAG,
     * as mpr does: only the count is compared.) */
    MPI_Get_count(&sts[0], MPI_INT, &count);
    SAY("proc null: count %d", count);

    /* A null request: complete, with an empty status (whose source MPICH and the standard
     * tell differently: not printed). */
    MPI_Request none = MPI_REQUEST_NULL;
    MPI_Wait(&none, &sts[0]);
    MPI_Get_count(&sts[0], MPI_INT, &count);
    SAY("null wait: tag %d count %d", sts[0].MPI_TAG, count);
    MPI_Test(&none, &flag, &sts[0]);
    SAY("null test: flag %d", flag);
    free(out);
    free(in);
}

static void any_and_some(void)
{
    /* Every rank sends its rank to every other; the receives complete in any order. */
    int n = size - 1, got[16], vals[16], idx, outcount, indices[16];
    MPI_Request recvs[16], sends[16];
    MPI_Status sts[16];
    for (int i = 0, p = 0; p < size; p++) {
        if (p == rank)
            continue;
        MPI_Irecv(&got[i], 1, MPI_INT, p, 6, MPI_COMM_WORLD, &recvs[i]);
        vals[i] = rank * 1000 + p;
        MPI_Isend(&vals[i], 1, MPI_INT, p, 6, MPI_COMM_WORLD, &sends[i]);
        i++;
    }
    long sum = 0;
    for (int k = 0; k < n; k++) {
        MPI_Waitany(n, recvs, &idx, &sts[0]);
        sum += got[idx];
        if (got[idx] != sts[0].MPI_SOURCE * 1000 + rank)
            SAY("waitany: wrong value %d from %d", got[idx], sts[0].MPI_SOURCE);
    }
    SAY("waitany: sum %ld", sum);
    MPI_Waitany(n, recvs, &idx, &sts[0]);
    SAY("waitany on all null: index is undefined = %d", idx == MPI_UNDEFINED);
    MPI_Waitall(n, sends, MPI_STATUSES_IGNORE);

    for (int i = 0, p = 0; p < size; p++) {
        if (p == rank)
            continue;
        MPI_Irecv(&got[i], 1, MPI_INT, p, 7, MPI_COMM_WORLD, &recvs[i]);
        MPI_Isend(&vals[i], 1, MPI_INT, p, 7, MPI_COMM_WORLD, &sends[i]);
        i++;
    }
    int done = 0;
    sum = 0;
    while (done < n) {
        MPI_Waitsome(n, recvs, &outcount, indices, sts);
        for (int k = 0; k < outcount; k++)
            sum += got[indices[k]];
        done += outcount;
    }
    SAY("waitsome: sum %ld", sum);
    MPI_Testsome(n, recvs, &outcount, indices, sts);
    SAY("testsome on all null: outcount is undefined = %d", outcount == MPI_UNDEFINED);
    int flag = 0;
    MPI_Testany(n, recvs, &idx, &flag, &sts[0]);
    SAY("testany on all null: flag %d index undefined %d", flag, idx == MPI_UNDEFINED);
    done = 0;
    while (done < n) {
        MPI_Testsome(n, sends, &outcount, indices, MPI_STATUSES_IGNORE);
        if (outcount != MPI_UNDEFINED)
            done += outcount;
    }
    SAY("testsome: sends done %d", done);
}

static void modes(void)
{
    int next = (rank + 1) % size, prev = (rank + size - 1) % size, v = -1, flag;
    MPI_Request req;
    /* A synchronous send is not complete before its receive is posted. */
    if (rank == 0) {
        int x = 42;
        MPI_Issend(&x, 1, MPI_INT, 1, 8, MPI_COMM_WORLD, &req);
        MPI_Test(&req, &flag, MPI_STATUS_IGNORE);
        SAY("issend done before the receive = %d", flag);
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_Wait(&req, MPI_STATUS_IGNORE);
        SAY("issend done after = %d", req == MPI_REQUEST_NULL);
    } else if (rank == 1) {
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_Recv(&v, 1, MPI_INT, 0, 8, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        SAY("issend received %d", v);
    } else {
        MPI_Barrier(MPI_COMM_WORLD);
    }
    /* Ssend of nothing, and of a large message, around the ring. */
    int *big = (int *)malloc(BIG * sizeof(int)), *in = (int *)malloc(BIG * sizeof(int));
    fill(big, BIG, rank + 50);
    if (rank % 2 == 0) {
        MPI_Ssend(NULL, 0, MPI_INT, next, 9, MPI_COMM_WORLD);
        MPI_Recv(NULL, 0, MPI_INT, prev, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else {
        MPI_Recv(NULL, 0, MPI_INT, prev, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Ssend(NULL, 0, MPI_INT, next, 9, MPI_COMM_WORLD);
    }
    SAY("empty ssend ring done");
    MPI_Request r2;
    MPI_Irecv(in, BIG, MPI_INT, prev, 10, MPI_COMM_WORLD, &r2);
    MPI_Ssend(big, BIG, MPI_INT, next, 10, MPI_COMM_WORLD);
    MPI_Wait(&r2, MPI_STATUS_IGNORE);
    SAY("big ssend: bad %ld", check(in, BIG, prev + 50));
    /* Ready send: the receive is posted first (a barrier orders it). */
    MPI_Irecv(&v, 1, MPI_INT, prev, 11, MPI_COMM_WORLD, &r2);
    MPI_Barrier(MPI_COMM_WORLD);
    int x = rank + 500;
    MPI_Rsend(&x, 1, MPI_INT, next, 11, MPI_COMM_WORLD);
    MPI_Wait(&r2, MPI_STATUS_IGNORE);
    SAY("rsend: %d", v);
    /* The same, nonblocking, from memory of MPI_Alloc_mem. */
    int *am = NULL;
    MPI_Alloc_mem(2 * sizeof(int), MPI_INFO_NULL, &am);
    am[0] = rank + 600;
    MPI_Irecv(&am[1], 1, MPI_INT, prev, 14, MPI_COMM_WORLD, &r2);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Request rr;
    MPI_Irsend(&am[0], 1, MPI_INT, next, 14, MPI_COMM_WORLD, &rr);
    MPI_Wait(&rr, MPI_STATUS_IGNORE);
    MPI_Wait(&r2, MPI_STATUS_IGNORE);
    SAY("irsend from MPI_Alloc_mem memory: %d", am[1]);
    SAY("free_mem: %d", MPI_Free_mem(am));

    /* Buffered sends from an attached buffer. */
    int room = 2 * (BIG * (int)sizeof(int) + MPI_BSEND_OVERHEAD);
    char *attached = (char *)malloc((size_t)room);
    MPI_Buffer_attach(attached, room);
    MPI_Bsend(big, BIG, MPI_INT, next, 12, MPI_COMM_WORLD);
    MPI_Ibsend(&x, 1, MPI_INT, next, 13, MPI_COMM_WORLD, &req);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
    MPI_Recv(in, BIG, MPI_INT, prev, 12, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Recv(&v, 1, MPI_INT, prev, 13, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    SAY("bsend: bad %ld, ibsend %d", check(in, BIG, prev + 50), v);
    void *back;
    int back_size;
    MPI_Buffer_detach(&back, &back_size);
    SAY("detach gives the buffer back = %d", back == (void *)attached && back_size == room);
    /* Without a buffer, a buffered send has no room. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int err = MPI_Bsend(&x, 1, MPI_INT, next, 14, MPI_COMM_WORLD);
    SAY("bsend without a buffer: class %d", class_of(err));
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    free(attached);

    /* Sendrecv_replace around the ring. */
    int ring = rank * 11;
    MPI_Status st;
    MPI_Sendrecv_replace(&ring, 1, MPI_INT, next, 15, prev, 15, MPI_COMM_WORLD, &st);
    SAY("sendrecv_replace: %d from %d", ring, st.MPI_SOURCE);
    free(big);
    free(in);
}

static void persistent(void)
{
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    int out[3], in[3];
    MPI_Request reqs[2];
    MPI_Status sts[2];
    MPI_Recv_init(in, 3, MPI_INT, prev, 16, MPI_COMM_WORLD, &reqs[0]);
    MPI_Send_init(out, 3, MPI_INT, next, 16, MPI_COMM_WORLD, &reqs[1]);
    for (int it = 0; it < 3; it++) {
        out[0] = rank, out[1] = it, out[2] = rank * it;
        MPI_Startall(2, reqs);
        MPI_Waitall(2, reqs, sts);
        SAY("persistent %d: %d %d %d from %d, still a request %d", it, in[0], in[1], in[2], sts[0].MPI_SOURCE,
            reqs[0] != MPI_REQUEST_NULL && reqs[1] != MPI_REQUEST_NULL);
    }
    /* One started alone, and an inactive one waited for: complete at once. */
    MPI_Start(&reqs[0]);
    MPI_Send(out, 3, MPI_INT, next, 16, MPI_COMM_WORLD);
    MPI_Wait(&reqs[0], MPI_STATUS_IGNORE);
    int flag;
    MPI_Test(&reqs[1], &flag, MPI_STATUS_IGNORE);
    SAY("inactive test: flag %d", flag);
    MPI_Request_free(&reqs[0]);
    MPI_Request_free(&reqs[1]);
    SAY("freed = %d", reqs[0] == MPI_REQUEST_NULL && reqs[1] == MPI_REQUEST_NULL);
    /* A synchronous persistent send. */
    MPI_Request s;
    MPI_Ssend_init(out, 3, MPI_INT, next, 17, MPI_COMM_WORLD, &s);
    MPI_Start(&s);
    MPI_Recv(in, 3, MPI_INT, prev, 17, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Wait(&s, MPI_STATUS_IGNORE);
    MPI_Request_free(&s);
    SAY("ssend_init: %d %d %d", in[0], in[1], in[2]);
    /* Ready and buffered persistent sends. */
    MPI_Request rs, rrecv;
    MPI_Irecv(in, 3, MPI_INT, prev, 19, MPI_COMM_WORLD, &rrecv);
    MPI_Rsend_init(out, 3, MPI_INT, next, 19, MPI_COMM_WORLD, &rs);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Start(&rs);
    MPI_Wait(&rs, MPI_STATUS_IGNORE);
    MPI_Wait(&rrecv, MPI_STATUS_IGNORE);
    MPI_Request_free(&rs);
    SAY("rsend_init: %d %d %d", in[0], in[1], in[2]);
    int room = 2 * (3 * (int)sizeof(int) + MPI_BSEND_OVERHEAD), dsize;
    char *bb = (char *)malloc((size_t)room);
    void *det;
    MPI_Buffer_attach(bb, room);
    MPI_Request bs;
    MPI_Bsend_init(out, 3, MPI_INT, next, 20, MPI_COMM_WORLD, &bs);
    for (int it = 0; it < 2; it++) {
        MPI_Start(&bs);
        MPI_Wait(&bs, MPI_STATUS_IGNORE);
        out[0] += 1000;
    }
    MPI_Recv(in, 3, MPI_INT, prev, 20, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    int first0 = in[0];
    MPI_Recv(in, 3, MPI_INT, prev, 20, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Request_free(&bs);
    MPI_Buffer_detach(&det, &dsize);
    free(det);
    SAY("bsend_init twice: %d then %d %d %d, detached %d", first0, in[0], in[1], in[2], dsize == room);
    /* A send freed while in flight still arrives. */
    int v = rank + 900, w = -1;
    MPI_Request f;
    MPI_Isend(&v, 1, MPI_INT, next, 18, MPI_COMM_WORLD, &f);
    MPI_Request_free(&f);
    MPI_Recv(&w, 1, MPI_INT, prev, 18, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Barrier(MPI_COMM_WORLD);
    SAY("freed send arrived: %d", w);
    /* A receive freed while in flight still lands, before the message sent after its own. */
    int landed = -1, after = -1, first = rank + 950, second = rank + 960;
    MPI_Request fr;
    MPI_Irecv(&landed, 1, MPI_INT, prev, 30, MPI_COMM_WORLD, &fr);
    MPI_Request_free(&fr);
    SAY("freed receive: null %d", fr == MPI_REQUEST_NULL);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Send(&first, 1, MPI_INT, next, 30, MPI_COMM_WORLD);
    MPI_Send(&second, 1, MPI_INT, next, 31, MPI_COMM_WORLD);
    MPI_Recv(&after, 1, MPI_INT, prev, 31, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    SAY("freed receive landed: %d, then %d", landed, after);
}

static void errors(void)
{
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    int out[8] = {0}, in[2];
    MPI_Request reqs[2];
    MPI_Status sts[2];
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    /* A message too long for its receive: Wait reports the truncation. */
    MPI_Irecv(in, 2, MPI_INT, prev, 19, MPI_COMM_WORLD, &reqs[0]);
    MPI_Send(out, 8, MPI_INT, next, 19, MPI_COMM_WORLD);
    int err = MPI_Wait(&reqs[0], &sts[0]);
    SAY("wait on a truncated receive: class %d", class_of(err));
    /* In Waitall: MPI_ERR_IN_STATUS, each status telling its own. */
    MPI_Irecv(in, 2, MPI_INT, prev, 20, MPI_COMM_WORLD, &reqs[0]);
    MPI_Isend(out, 8, MPI_INT, next, 20, MPI_COMM_WORLD, &reqs[1]);
    err = MPI_Waitall(2, reqs, sts);
    SAY("waitall with a truncated receive: class %d, status classes %d; the truncated one from %d, tag %d",
        class_of(err), class_of(sts[0].MPI_ERROR), sts[0].MPI_SOURCE == prev, sts[0].MPI_TAG);
    /* A truncated receive's status tells whose message it was; in Waitall, a receive that
     * succeeded says so beside the one that failed. */
    MPI_Irecv(in, 1, MPI_INT, prev, 21, MPI_COMM_WORLD, &reqs[0]);
    MPI_Irecv(in + 1, 1, MPI_INT, prev, 22, MPI_COMM_WORLD, &reqs[1]);
    MPI_Send(out, 1, MPI_INT, next, 21, MPI_COMM_WORLD);
    MPI_Send(out, 3, MPI_INT, next, 22, MPI_COMM_WORLD);
    sts[0].MPI_ERROR = sts[1].MPI_ERROR = -1;
    err = MPI_Waitall(2, reqs, sts);
    SAY("waitall, one of two truncated: class %d; tag %d error %d; tag %d class %d", class_of(err), sts[0].MPI_TAG,
        sts[0].MPI_ERROR, sts[1].MPI_TAG, class_of(sts[1].MPI_ERROR));
    MPI_Send(out, 8, MPI_INT, next, 23, MPI_COMM_WORLD);
    MPI_Status rs;
    err = MPI_Recv(in, 2, MPI_INT, prev, 23, MPI_COMM_WORLD, &rs);
    SAY("recv truncated: class %d, from %d, tag %d", class_of(err), rs.MPI_SOURCE == prev, rs.MPI_TAG);
    /* The same into a derived type (the receive's other path). */
    MPI_Datatype two_ints;
    MPI_Type_contiguous(2, MPI_INT, &two_ints);
    MPI_Type_commit(&two_ints);
    MPI_Send(out, 8, MPI_INT, next, 24, MPI_COMM_WORLD);
    rs.MPI_TAG = -1;
    err = MPI_Recv(in, 1, two_ints, prev, 24, MPI_COMM_WORLD, &rs);
    SAY("recv of a derived type truncated: class %d, from %d, tag %d", class_of(err), rs.MPI_SOURCE == prev,
        rs.MPI_TAG);
    MPI_Type_free(&two_ints);
    /* Bad arguments of a nonblocking call. */
    MPI_Request r;
    SAY("isend to rank 99: class %d", class_of(MPI_Isend(out, 1, MPI_INT, 99, 0, MPI_COMM_WORLD, &r)));
    SAY("irecv with tag -5: class %d", class_of(MPI_Irecv(in, 1, MPI_INT, 0, -5, MPI_COMM_WORLD, &r)));
    SAY("isend on communicator 77: class %d", class_of(MPI_Isend(out, 1, MPI_INT, 0, 0, 77, &r)));
    SAY("irecv of datatype 999: class %d", class_of(MPI_Irecv(in, 1, 999, 0, 0, MPI_COMM_WORLD, &r)));
    /* A send refused for its null request pointer never starts: the receive of its tag
     * gets the message sent after it. */
    int stray = 66, good = 77, got = -1;
    SAY("isend with a null request pointer: class %d",
        class_of(MPI_Isend(&stray, 1, MPI_INT, next, 25, MPI_COMM_WORLD, NULL)));
    MPI_Send(&good, 1, MPI_INT, next, 25, MPI_COMM_WORLD);
    MPI_Recv(&got, 1, MPI_INT, prev, 25, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    SAY("the refused send sent nothing: got %d", got);
    /* A matched message stays with its handle when MPI_Imrecv is refused for a null request
     * pointer; a nonblocking collective refused so never starts. */
    MPI_Message m;
    int sent = rank + 880, mgot = -1;
    MPI_Send(&sent, 1, MPI_INT, next, 26, MPI_COMM_WORLD);
    MPI_Mprobe(prev, 26, MPI_COMM_WORLD, &m, MPI_STATUS_IGNORE);
    SAY("imrecv with a null request pointer: class %d", class_of(MPI_Imrecv(&mgot, 1, MPI_INT, &m, NULL)));
    mgot = -1;
    MPI_Mrecv(&mgot, 1, MPI_INT, &m, MPI_STATUS_IGNORE);
    SAY("its message is still there: got %d", mgot);
    SAY("ibarrier with a null request pointer: class %d", class_of(MPI_Ibarrier(MPI_COMM_WORLD, NULL)));
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
}

/* Matching probes: a message MPI_Mprobe took is received by MPI_Mrecv alone, even when a
 * receive of the same selector comes first; MPI_Improbe; MPI_Imrecv of a rendezvous message
 * into a derived type; MPI_PROC_NULL; a receive cancelled, and one a message matched first. */
static void matched_and_cancelled(void)
{
    int next = (rank + 1) % size, prev = (rank + size - 1) % size, n = 50000;
    int a = rank * 10 + 1, b = rank * 10 + 2, x = -1, y = -1, count, flag = 0;
    int *big = (int *)malloc(sizeof(int) * n), *spread = (int *)malloc(sizeof(int) * 2 * n);
    for (int i = 0; i < n; i++)
        big[i] = rank + i;
    for (int i = 0; i < 2 * n; i++)
        spread[i] = -1;
    MPI_Request s[3], r;
    MPI_Isend(&a, 1, MPI_INT, next, 20, MPI_COMM_WORLD, &s[0]);
    MPI_Isend(&b, 1, MPI_INT, next, 20, MPI_COMM_WORLD, &s[1]);
    MPI_Isend(big, n, MPI_INT, next, 21, MPI_COMM_WORLD, &s[2]);
    MPI_Message m;
    MPI_Status st;
    MPI_Mprobe(prev, 20, MPI_COMM_WORLD, &m, &st);
    MPI_Get_count(&st, MPI_INT, &count);
    SAY("mprobe source %d tag %d count %d", st.MPI_SOURCE, st.MPI_TAG, count);
    MPI_Recv(&y, 1, MPI_INT, prev, 20, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Mrecv(&x, 1, MPI_INT, &m, &st);
    SAY("mrecv %d then recv %d, message null %d", x, y, m == MPI_MESSAGE_NULL);
    while (!flag)
        MPI_Improbe(prev, 21, MPI_COMM_WORLD, &flag, &m, &st);
    MPI_Get_count(&st, MPI_INT, &count);
    MPI_Datatype every_other;
    MPI_Type_vector(n, 1, 2, MPI_INT, &every_other);
    MPI_Type_commit(&every_other);
    MPI_Imrecv(spread, 1, every_other, &m, &r);
    MPI_Wait(&r, &st);
    SAY("imrecv count %d first %d last %d gap %d", count, spread[0], spread[2 * (n - 1)], spread[1]);
    MPI_Improbe(prev, 22, MPI_COMM_WORLD, &flag, &m, &st);
    SAY("improbe of nothing = %d", flag);
    /* (MPICH reports source MPI_ANY_SOURCE for these; MPI, and mpr, MPI_PROC_NULL: the
     * count alone is compared.) */
    MPI_Mprobe(MPI_PROC_NULL, 5, MPI_COMM_WORLD, &m, &st);
    MPI_Get_count(&st, MPI_INT, &count);
    SAY("mprobe proc null: no proc %d count %d", m == MPI_MESSAGE_NO_PROC, count);
    MPI_Mrecv(&x, 1, MPI_INT, &m, &st);
    MPI_Get_count(&st, MPI_INT, &count);
    SAY("mrecv proc null: count %d null %d", count, m == MPI_MESSAGE_NULL);
    MPI_Waitall(3, s, MPI_STATUSES_IGNORE);
    MPI_Type_free(&every_other);
    free(big);
    free(spread);

    MPI_Irecv(&x, 1, MPI_INT, prev, 23, MPI_COMM_WORLD, &r);
    MPI_Cancel(&r);
    MPI_Wait(&r, &st);
    MPI_Test_cancelled(&st, &flag);
    SAY("cancelled = %d, request null %d", flag, r == MPI_REQUEST_NULL);
    /* A synchronous send returns once its receive matched: then cancelling is too late. */
    x = -1;
    MPI_Irecv(&x, 1, MPI_INT, prev, 24, MPI_COMM_WORLD, &r);
    MPI_Ssend(&a, 1, MPI_INT, next, 24, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Cancel(&r);
    MPI_Wait(&r, &st);
    MPI_Test_cancelled(&st, &flag);
    SAY("matched, then cancelled = %d, got %d", flag, x);
}

/* Small sends, which complete as they start: each is a request like any other, in
 * Request_get_status, Test, Waitany and a Waitall beside a receive and a null request. */
static void eager_sends(void)
{
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    int v[4], in[4] = {-1, -1, -1, -1}, flag = 0, idx = -1;
    MPI_Request s[4], r[4], mix[3];
    MPI_Status sts[3];
    for (int i = 0; i < 4; i++) {
        v[i] = rank * 10 + i;
        MPI_Irecv(&in[i], 1, MPI_INT, prev, 30 + i, MPI_COMM_WORLD, &r[i]);
    }
    for (int i = 0; i < 4; i++)
        MPI_Isend(&v[i], 1, MPI_INT, next, 30 + i, MPI_COMM_WORLD, &s[i]);
    do
        MPI_Request_get_status(s[0], &flag, MPI_STATUS_IGNORE);
    while (!flag);
    SAY("get_status keeps a send's request: %d", s[0] != MPI_REQUEST_NULL);
    do
        MPI_Test(&s[0], &flag, MPI_STATUS_IGNORE);
    while (!flag);
    SAY("test frees it: %d", s[0] == MPI_REQUEST_NULL);
    MPI_Waitany(4, s, &idx, MPI_STATUS_IGNORE);
    SAY("waitany of sends: index in 1..3 %d, freed %d", idx >= 1 && idx <= 3, idx >= 1 && s[idx] == MPI_REQUEST_NULL);
    int left = idx == 1 ? 2 : 1;
    mix[0] = s[left];
    mix[1] = r[0];
    mix[2] = MPI_REQUEST_NULL;
    MPI_Waitall(3, mix, sts);
    SAY("waitall of a send, a receive and a null: got %d from %d tag %d, all null %d", in[0], sts[1].MPI_SOURCE,
        sts[1].MPI_TAG, mix[0] == MPI_REQUEST_NULL && mix[1] == MPI_REQUEST_NULL && mix[2] == MPI_REQUEST_NULL);
    s[left] = MPI_REQUEST_NULL;
    MPI_Waitall(4, s, MPI_STATUSES_IGNORE);
    MPI_Waitall(3, &r[1], MPI_STATUSES_IGNORE);
    SAY("eager sends: got %d %d %d", in[1], in[2], in[3]);
}

/* Generalized requests: what the program's functions saw, by request. */
struct greq {
    int id, queries, frees, cancels, cancelled_complete, query_code, free_code;
    int cancel_asked;
    volatile int ready; /* the thread's work, done before it completes the request */
    MPI_Request req;
};

static int greq_query(void *extra, MPI_Status *st)
{
    struct greq *g = (struct greq *)extra;
    g->queries++;
    st->MPI_SOURCE = 100 + g->id;
    st->MPI_TAG = 200 + g->id;
    MPI_Status_set_elements(st, MPI_INT, g->id);
    MPI_Status_set_cancelled(st, g->cancel_asked);
    return g->query_code;
}

static int greq_free(void *extra)
{
    struct greq *g = (struct greq *)extra;
    g->frees++;
    return g->free_code;
}

static int greq_cancel(void *extra, int complete)
{
    struct greq *g = (struct greq *)extra;
    g->cancels++;
    g->cancelled_complete = complete;
    g->cancel_asked = 1;
    return MPI_SUCCESS;
}

static void *greq_worker(void *arg)
{
    struct greq *g = (struct greq *)arg;
    usleep(20000); /* the main thread waits for it meanwhile */
    g->ready = 1;
    MPI_Grequest_complete(g->req);
    return NULL;
}

static void greq_say(const char *what, struct greq *g, const MPI_Status *st)
{
    int n = -1, cancelled = -1;
    MPI_Get_count(st, MPI_INT, &n);
    MPI_Test_cancelled(st, &cancelled);
    SAY("greq %s: source %d tag %d count %d cancelled %d; queries %d frees %d cancels %d", what, st->MPI_SOURCE,
        st->MPI_TAG, n, cancelled, g->queries, g->frees, g->cancels);
}

static void generalized(void)
{
    struct greq g[6];
    MPI_Status st;
    int flag = -1;
    memset(g, 0, sizeof g);
    for (int i = 0; i < 6; i++)
        g[i].id = i + 1;
    /* Completed before the wait: the wait's status is query_fn's, then free_fn runs. */
    MPI_Grequest_start(greq_query, greq_free, greq_cancel, &g[0], &g[0].req);
    MPI_Test(&g[0].req, &flag, &st);
    SAY("greq test before it completed: flag %d, queries %d", flag, g[0].queries);
    MPI_Request_get_status(g[0].req, &flag, &st);
    SAY("greq get_status before it completed: flag %d", flag);
    MPI_Grequest_complete(g[0].req);
    MPI_Request_get_status(g[0].req, &flag, &st);
    SAY("greq get_status once it completed: flag %d, still a request %d", flag, g[0].req != MPI_REQUEST_NULL);
    greq_say("get_status", &g[0], &st);
    MPI_Wait(&g[0].req, &st);
    greq_say("wait", &g[0], &st);
    SAY("greq after its wait: null %d", g[0].req == MPI_REQUEST_NULL);
    /* Cancelled before it completed: cancel_fn is told so, and query_fn says cancelled. */
    MPI_Grequest_start(greq_query, greq_free, greq_cancel, &g[1], &g[1].req);
    MPI_Cancel(&g[1].req);
    MPI_Grequest_complete(g[1].req);
    MPI_Wait(&g[1].req, &st);
    greq_say("cancelled", &g[1], &st);
    SAY("greq cancel saw complete %d", g[1].cancelled_complete);
    /* Freed before it completed: free_fn runs at MPI_Grequest_complete; freed after, at once. */
    MPI_Request kept;
    MPI_Grequest_start(greq_query, greq_free, greq_cancel, &g[2], &g[2].req);
    kept = g[2].req;
    MPI_Request_free(&g[2].req);
    /* (MPICH runs free_fn here, where MPI-3.1 12.2 says it waits for completion; refusals.c
     * checks mpr's.) */
    SAY("greq freed first: null %d", g[2].req == MPI_REQUEST_NULL);
    MPI_Grequest_complete(kept);
    SAY("greq freed first, then completed: frees %d, queries %d", g[2].frees, g[2].queries);
    MPI_Grequest_start(greq_query, greq_free, greq_cancel, &g[3], &g[3].req);
    MPI_Grequest_complete(g[3].req);
    MPI_Request_free(&g[3].req);
    SAY("greq completed, then freed: frees %d, queries %d", g[3].frees, g[3].queries);
    /* Completed by another thread while this one waits for it beside a message from the
     * previous rank: Waitall, then Waitany over a receive and a request still in flight. */
    int next = (rank + 1) % size, prev = (rank + size - 1) % size, in = -1, out = rank;
    MPI_Request reqs[3];
    MPI_Status sts[3];
    pthread_t t;
    MPI_Grequest_start(greq_query, greq_free, greq_cancel, &g[4], &g[4].req);
    reqs[0] = g[4].req;
    MPI_Irecv(&in, 1, MPI_INT, prev, 40, MPI_COMM_WORLD, &reqs[1]);
    MPI_Isend(&out, 1, MPI_INT, next, 40, MPI_COMM_WORLD, &reqs[2]);
    pthread_create(&t, NULL, greq_worker, &g[4]);
    MPI_Waitall(3, reqs, sts);
    pthread_join(t, NULL);
    greq_say("completed by a thread", &g[4], &sts[0]);
    SAY("greq beside a receive: got %d from %d, work done %d", in, sts[1].MPI_SOURCE, g[4].ready);
    /* Testall polling a generalized request first still moves the receive beside it. */
    struct greq gt;
    memset(&gt, 0, sizeof gt);
    gt.id = 7;
    MPI_Grequest_start(greq_query, greq_free, greq_cancel, &gt, &gt.req);
    reqs[0] = gt.req;
    MPI_Irecv(&in, 1, MPI_INT, prev, 43, MPI_COMM_WORLD, &reqs[1]);
    MPI_Send(&out, 1, MPI_INT, next, 43, MPI_COMM_WORLD);
    pthread_create(&t, NULL, greq_worker, &gt);
    int all = 0, tests = 0;
    while (!all) {
        MPI_Testall(2, reqs, &all, sts);
        tests++;
    }
    pthread_join(t, NULL);
    /* (MPICH runs query_fn once more in MPI_Testall: the count of queries is not printed) */
    SAY("greq testall: source %d tag %d, frees %d", sts[0].MPI_SOURCE, sts[0].MPI_TAG, gt.frees);
    SAY("greq testall beside a receive: got %d from %d, tested more than once %d", in, sts[1].MPI_SOURCE, tests > 1);
    int index = -1;
    MPI_Grequest_start(greq_query, greq_free, greq_cancel, &g[5], &g[5].req);
    reqs[0] = g[5].req;
    MPI_Irecv(&in, 1, MPI_INT, prev, 41, MPI_COMM_WORLD, &reqs[1]);
    MPI_Send(&out, 1, MPI_INT, next, 41, MPI_COMM_WORLD);
    MPI_Waitany(2, reqs, &index, &st);
    SAY("greq waitany: index %d, greq still in flight %d, queries %d", index, reqs[0] != MPI_REQUEST_NULL,
        g[5].queries);
    MPI_Grequest_complete(reqs[0]);
    MPI_Waitany(2, reqs, &index, &st);
    greq_say("waitany", &g[5], &st);
    SAY("greq waitany then: index %d", index);
    /* Errors: query_fn's code is the wait's; free_fn's too (in Waitall, MPI_ERR_IN_STATUS and
     * the status's); a request that is not generalized is refused. */
    struct greq e[2];
    memset(e, 0, sizeof e);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    e[0].query_code = MPI_ERR_OTHER;
    MPI_Grequest_start(greq_query, greq_free, greq_cancel, &e[0], &e[0].req);
    MPI_Grequest_complete(e[0].req);
    SAY("greq whose query fails: wait class %d", class_of(MPI_Wait(&e[0].req, &st)));
    e[1].free_code = MPI_ERR_OTHER;
    MPI_Grequest_start(greq_query, greq_free, greq_cancel, &e[1], &e[1].req);
    MPI_Grequest_complete(e[1].req);
    int err = MPI_Waitall(1, &e[1].req, sts);
    SAY("greq whose free fails: waitall class %d, status class %d", class_of(err), class_of(sts[0].MPI_ERROR));
    MPI_Irecv(&in, 1, MPI_INT, prev, 42, MPI_COMM_WORLD, &reqs[0]);
    SAY("complete of a receive's request: class %d", class_of(MPI_Grequest_complete(reqs[0])));
    MPI_Send(&out, 1, MPI_INT, next, 42, MPI_COMM_WORLD);
    MPI_Wait(&reqs[0], MPI_STATUS_IGNORE);
    SAY("greq start with a null request pointer: class %d",
        class_of(MPI_Grequest_start(greq_query, greq_free, greq_cancel, &e[1], NULL)));
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
}

int main(int argc, char **argv)
{
    int provided;
    /* A generalized request's thread calls MPI_Grequest_complete: MPICH asks for this level. */
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    nonblocking();
    any_and_some();
    modes();
    persistent();
    matched_and_cancelled();
    eager_sends();
    generalized();
    errors();
    MPI_Barrier(MPI_COMM_WORLD);
    SAY("done");
    MPI_Finalize();
    return 0;
}
