/* Erroneous calls that mpr refuses and MPICH lets through, so checked against mpr's own
 * answers rather than MPICH's:
 * - request-based one-sided operations (MPI_Rput, Rget, Raccumulate, Rget_accumulate)
 *   outside a passive-target epoch (MPI-3.1, 11.3.5): MPI_ERR_RMA_SYNC and a null request
 *   (MPICH accepts them in a fence epoch);
 * - MPI_Pack into a buffer too small for the data: MPI_ERR_TRUNCATE, nothing written (MPICH
 *   writes past the buffer and says success);
 * - MPI_Comm_set_attr with a freed key: MPI_ERR_KEYVAL (MPICH says success);
 * - an accumulate of MPI_MAX on complex numbers, which have no order, of MPI_SUM on
 *   bytes or on value-index pairs, or of MPI_MINLOC on ints: MPI_ERR_OP, the target
 *   unchanged (MPICH says success); and one call that is no error, where MPICH differs:
 *   a value-index pair's accumulate into a window of just its bytes;
 * - an assertion naming no MPI_MODE_ flag: MPI_ERR_ASSERT; a window attribute key MPI does
 *   not define: MPI_ERR_KEYVAL;
 * - a made-up info handle where a window or memory is made, or set on a window:
 *   MPI_ERR_INFO, by the window's handler where there is a window;
 * - MPI_Add_error_code for a value that is no class, MPI_Add_error_string for a
 *   predefined class (MPI-3.1 8.5 calls it erroneous): MPI_ERR_ARG;
 * - MPI_Grequest_complete of a request completed already: MPI_ERR_REQUEST (MPICH aborts);
 *   and, where MPICH differs from MPI-3.1 12.2 on generalized requests: free_fn of a request
 *   freed before it completed runs at MPI_Grequest_complete, not at MPI_Request_free;
 *   free_fn's code is what the wait returns (MPICH returns MPI_ERR_OTHER), and the status's
 *   in MPI_Waitall; free_fn runs even after query_fn failed;
 * - portable packing (MPI_Pack_external ...) in a representation other than "external32":
 *   MPI_ERR_ARG; into or out of a buffer too small: MPI_ERR_TRUNCATE, the position unmoved
 *   (MPICH writes past the buffer); a long beyond external32's 4 bytes: MPI_ERR_CONVERSION
 *   (MPICH keeps its low bytes);
 * - a reduction of Fortran's CHARACTER (MPI-3.1 5.9.2 defines no operation on it):
 *   MPI_ERR_OP, the result untouched (MPICH computes the maximum). */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

/* A generalized request's functions: query_fn fails with *code, free_fn counts its calls
 * in frees[0] and returns frees[1]. */
static int g_code, g_frees[2];

static int g_query(void *extra, MPI_Status *st)
{
    (void)extra;
    st->MPI_SOURCE = 0;
    st->MPI_TAG = 0;
    MPI_Status_set_elements(st, MPI_BYTE, 0);
    MPI_Status_set_cancelled(st, 0);
    return g_code;
}

static int g_free(void *extra)
{
    (void)extra;
    g_frees[0]++;
    return g_frees[1];
}

static int g_cancel(void *extra, int complete)
{
    (void)extra;
    (void)complete;
    return MPI_SUCCESS;
}

static void on_win_error(MPI_Win *w, int *code, ...)
{
    (void)w;
    (void)code;
}

static void on_comm_error(MPI_Comm *c, int *code, ...)
{
    (void)c;
    (void)code;
}

int main(int argc, char **argv)
{
    int rank, size, *mem, v = 1, got = 0, cls;
    MPI_Win win;
    MPI_Request r[4];
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Win_allocate(4 * sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &mem, &win);
    MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN);
    /* A made-up info handle: refused by the window's handler (the world's is still fatal). */
    int info_cls;
    MPI_Error_class(MPI_Win_set_info(win, 12345), &info_cls);
    printf("%d: window info 12345: class %d\n", rank, info_cls);
    int next = (rank + 1) % size;
    MPI_Win_fence(0, win);
    int rc[4] = {
        MPI_Rput(&v, 1, MPI_INT, next, 0, 1, MPI_INT, win, &r[0]),
        MPI_Rget(&got, 1, MPI_INT, next, 0, 1, MPI_INT, win, &r[1]),
        MPI_Raccumulate(&v, 1, MPI_INT, next, 0, 1, MPI_INT, MPI_SUM, win, &r[2]),
        MPI_Rget_accumulate(&v, 1, MPI_INT, &got, 1, MPI_INT, next, 0, 1, MPI_INT, MPI_SUM, win, &r[3]),
    };
    MPI_Win_fence(0, win);
    for (int i = 0; i < 4; i++) {
        MPI_Error_class(rc[i], &cls);
        printf("%d: in a fence epoch: class %d, null %d\n", rank, cls, r[i] == MPI_REQUEST_NULL);
    }
    /* In a lock epoch on the target, the same call works. */
    MPI_Win_lock(MPI_LOCK_SHARED, next, 0, win);
    int ok = MPI_Rput(&v, 1, MPI_INT, next, 1, 1, MPI_INT, win, &r[0]);
    MPI_Wait(&r[0], MPI_STATUS_IGNORE);
    MPI_Win_unlock(next, win);
    printf("%d: in a lock epoch: %d\n", rank, ok);
    double z[2] = {5.0, 6.0}, seen[2] = {-1.0, -1.0};
    MPI_Win_lock(MPI_LOCK_EXCLUSIVE, rank, 0, win);
    for (int i = 0; i < 4; i++)
        mem[i] = 0;
    MPI_Win_unlock(rank, win);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Win_lock(MPI_LOCK_EXCLUSIVE, next, 0, win);
    MPI_Error_class(MPI_Accumulate(z, 1, MPI_C_DOUBLE_COMPLEX, next, 0, 1, MPI_C_DOUBLE_COMPLEX, MPI_MAX, win), &cls);
    MPI_Get(seen, 1, MPI_C_DOUBLE_COMPLEX, next, 0, 1, MPI_C_DOUBLE_COMPLEX, win);
    MPI_Win_unlock(next, win);
    printf("%d: max of complex numbers: class %d, target %g %g\n", rank, cls, seen[0], seen[1]);
    /* A sum of value-index pairs, a minimum-and-index of plain ints (MPI defines neither). */
    struct { double v; int i; } pair = {1.0, 1};
    int ints[2] = {1, 2}, pair_cls, loc_cls;
    MPI_Win_lock(MPI_LOCK_EXCLUSIVE, next, 0, win);
    MPI_Error_class(MPI_Accumulate(&pair, 1, MPI_DOUBLE_INT, next, 0, 1, MPI_DOUBLE_INT, MPI_SUM, win), &pair_cls);
    MPI_Error_class(MPI_Accumulate(ints, 2, MPI_INT, next, 0, 2, MPI_INT, MPI_MINLOC, win), &loc_cls);
    MPI_Win_unlock(next, win);
    printf("%d: sum of pairs: class %d, minloc of ints: class %d\n", rank, pair_cls, loc_cls);
    /* Not an error: a window of just a double and an int (no trailing padding) takes the
     * accumulate of one MPI_DOUBLE_INT (MPICH 4.0.2 gives other values here). */
    char *one_pair;
    MPI_Win pw;
    MPI_Win_allocate(sizeof(double) + sizeof(int), 1, MPI_INFO_NULL, MPI_COMM_WORLD, &one_pair, &pw);
    double value = 1e9;
    int index = -1;
    memcpy(one_pair, &value, sizeof value);
    memcpy(one_pair + sizeof value, &index, sizeof index);
    pair.v = rank % 2, pair.i = rank;
    MPI_Win_fence(0, pw);
    MPI_Accumulate(&pair, 1, MPI_DOUBLE_INT, next, 0, 1, MPI_DOUBLE_INT, MPI_MINLOC, pw);
    MPI_Win_fence(MPI_MODE_NOSUCCEED, pw);
    memcpy(&value, one_pair, sizeof value);
    memcpy(&index, one_pair + sizeof value, sizeof index);
    printf("%d: a window of one pair's bytes: %g at %d\n", rank, value, index);
    MPI_Win_free(&pw);
    /* A sum of bytes (bitwise operations only), an assertion of no MPI_MODE_ flag, a key
     * that is no window attribute. */
    unsigned char byte = 1;
    int sum_cls, assert_cls, key_cls, *val, found = 7;
    MPI_Win_lock(MPI_LOCK_EXCLUSIVE, next, 0, win);
    MPI_Error_class(MPI_Accumulate(&byte, 1, MPI_BYTE, next, 0, 1, MPI_BYTE, MPI_SUM, win), &sum_cls);
    MPI_Win_unlock(next, win);
    MPI_Error_class(MPI_Win_fence(1 << 20, win), &assert_cls);
    MPI_Error_class(MPI_Win_get_attr(win, 12345, &val, &found), &key_cls);
    printf("%d: sum of bytes: class %d, assertion 1<<20: class %d, window key 12345: class %d\n", rank, sum_cls,
           assert_cls, key_cls);

    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    /* The same handle where a window or memory is made. */
    MPI_Win no_win = MPI_WIN_NULL;
    void *mine = NULL;
    int created_cls, alloc_cls;
    MPI_Error_class(MPI_Win_create_dynamic(12345, MPI_COMM_WORLD, &no_win), &created_cls);
    MPI_Error_class(MPI_Alloc_mem(16, 12345, &mine), &alloc_cls);
    printf("%d: info 12345 making a window: class %d, null %d; allocating: class %d, null %d\n", rank, created_cls,
           no_win == MPI_WIN_NULL, alloc_cls, mine == NULL);
    char small[4] = {'a', 'b', 'c', 'd'};
    int data[4] = {1, 2, 3, 4}, pos = 0, key, k;
    MPI_Error_class(MPI_Pack(data, 4, MPI_INT, small, sizeof small, &pos, MPI_COMM_WORLD), &cls);
    printf("%d: pack overflow: class %d, position %d, buffer %.4s\n", rank, cls, pos, small);
    MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, MPI_COMM_NULL_DELETE_FN, &key, NULL);
    k = key;
    MPI_Comm_free_keyval(&key);
    MPI_Error_class(MPI_Comm_set_attr(MPI_COMM_WORLD, k, &v), &cls);
    printf("%d: set_attr of a freed key: class %d\n", rank, cls);
    /* An error handler set on the wrong kind of object (MPICH takes it). */
    MPI_Errhandler for_win, for_comm;
    MPI_Win_create_errhandler(on_win_error, &for_win);
    MPI_Comm_create_errhandler(on_comm_error, &for_comm);
    int on_comm = MPI_Comm_set_errhandler(MPI_COMM_WORLD, for_win), on_win;
    MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN);
    on_win = MPI_Win_set_errhandler(win, for_comm);
    MPI_Error_class(on_comm, &cls);
    MPI_Error_class(on_win, &k);
    printf("%d: a window's handler on a communicator: class %d, a communicator's on a window: class %d\n", rank, cls, k);
    /* Cartesian grids: a dimension of no points (MPICH makes a communicator of it), and
       grid questions to a communicator without a grid (MPICH crashes). */
    int zero[2] = {2, 0}, periods[2] = {0, 0}, out[2], nd = -1;
    MPI_Comm none = MPI_COMM_NULL;
    MPI_Error_class(MPI_Cart_create(MPI_COMM_WORLD, 2, zero, periods, 0, &none), &cls);
    printf("%d: grid with a dimension of no points: class %d, null %d\n", rank, cls, none == MPI_COMM_NULL);
    MPI_Error_class(MPI_Cart_get(MPI_COMM_WORLD, 2, out, out, out), &cls);
    printf("%d: grid of a communicator without one: class %d\n", rank, cls);
    MPI_Error_class(MPI_Cartdim_get(MPI_COMM_WORLD, &nd), &cls);
    printf("%d: dimensions of a communicator without a grid: class %d, %d\n", rank, cls, nd);
    /* A request's handle used after its request completed (through a copy), and a handle
       no call made: MPICH cannot tell them from live ones. The receive is in flight when
       its handle is copied (its message is sent after a barrier). */
    MPI_Request live, copy, made_up = -12345;
    int x = -1, y = rank + 40, flag = -1, c[5];
    MPI_Irecv(&x, 1, MPI_INT, (rank + size - 1) % size, 40, MPI_COMM_WORLD, &live);
    copy = live;
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Send(&y, 1, MPI_INT, next, 40, MPI_COMM_WORLD);
    MPI_Wait(&live, MPI_STATUS_IGNORE);
    MPI_Error_class(MPI_Wait(&copy, MPI_STATUS_IGNORE), &c[0]);
    MPI_Error_class(MPI_Test(&copy, &flag, MPI_STATUS_IGNORE), &c[1]);
    MPI_Error_class(MPI_Cancel(&copy), &c[2]);
    MPI_Error_class(MPI_Request_free(&copy), &c[3]);
    MPI_Error_class(MPI_Wait(&made_up, MPI_STATUS_IGNORE), &c[4]);
    printf("%d: a completed request's handle: got %d, classes %d %d %d %d, a made-up handle: class %d\n", rank,
           x, c[0], c[1], c[2], c[3], c[4]);
    /* A window handle no call made (MPICH cannot tell it from a live one), on the calls
       whose common case mpr takes in a few instructions: each must still refuse it. */
    MPI_Win bogus = 77;
    int w[6];
    MPI_Error_class(MPI_Put(&v, 1, MPI_INT, next, 0, 1, MPI_INT, bogus), &w[0]);
    MPI_Error_class(MPI_Get(&got, 1, MPI_INT, next, 0, 1, MPI_INT, bogus), &w[1]);
    MPI_Error_class(MPI_Win_flush(next, bogus), &w[2]);
    MPI_Error_class(MPI_Win_flush_local(next, bogus), &w[3]);
    MPI_Error_class(MPI_Win_flush_all(bogus), &w[4]);
    MPI_Error_class(MPI_Win_flush_local_all(bogus), &w[5]);
    printf("%d: a made-up window: classes %d %d %d %d %d %d\n", rank, w[0], w[1], w[2], w[3], w[4], w[5]);

    /* An error code of a value that is no class, a text for a predefined class. */
    int added, code = 0, ac[2];
    MPI_Add_error_class(&added);
    MPI_Error_class(MPI_Add_error_code(added + 1000, &code), &ac[0]);
    MPI_Error_class(MPI_Add_error_string(MPI_ERR_ARG, "mine"), &ac[1]);
    printf("%d: error code of no class: class %d; text for a predefined class: class %d\n", rank, ac[0], ac[1]);
    /* The remote group of an intra-communicator (MPICH answers with its own group). */
    MPI_Group remote = MPI_GROUP_NULL;
    int rsize = -1;
    MPI_Error_class(MPI_Comm_remote_size(MPI_COMM_WORLD, &rsize), &ac[0]);
    MPI_Error_class(MPI_Comm_remote_group(MPI_COMM_WORLD, &remote), &ac[1]);
    printf("%d: remote size of an intra-communicator: class %d, %d; its remote group: class %d, null %d\n", rank,
           ac[0], rsize, ac[1], remote == MPI_GROUP_NULL);
    /* On an inter-communicator: MPI_Scan and MPI_Iscan (MPI's on intra-communicators alone),
     * and what mpr does not offer there (MPICH does): refused, nothing sent. */
    MPI_Comm alone, inter, grid = MPI_COMM_NULL;
    MPI_Win iwin = MPI_WIN_NULL;
    MPI_Request ireq = MPI_REQUEST_NULL;
    int dims[1] = {1}, iperiods[1] = {0}, ic[4], iout[1];
    MPI_Comm_split(MPI_COMM_WORLD, rank, 0, &alone);
    MPI_Intercomm_create(alone, 0, MPI_COMM_WORLD, (rank + 1) % 2, 3, &inter);
    MPI_Comm_set_errhandler(inter, MPI_ERRORS_RETURN);
    MPI_Error_class(MPI_Scan(&v, iout, 1, MPI_INT, MPI_SUM, inter), &ic[0]);
    MPI_Error_class(MPI_Iscan(&v, iout, 1, MPI_INT, MPI_SUM, inter, &ireq), &ic[1]);
    MPI_Error_class(MPI_Win_create(mem, 4, 1, MPI_INFO_NULL, inter, &iwin), &ic[2]);
    MPI_Error_class(MPI_Cart_create(inter, 1, dims, iperiods, 0, &grid), &ic[3]);
    printf("%d: on an inter-communicator: scan class %d, iscan class %d, window class %d, grid class %d; "
           "null %d %d %d\n",
           rank, ic[0], ic[1], ic[2], ic[3], ireq == MPI_REQUEST_NULL, iwin == MPI_WIN_NULL, grid == MPI_COMM_NULL);
    MPI_Comm_free(&inter);
    /* A remote leader the world lacks: refused at the leader, which its group follows. */
    MPI_Comm_set_errhandler(alone, MPI_ERRORS_RETURN);
    MPI_Comm bad = MPI_COMM_NULL;
    MPI_Error_class(MPI_Intercomm_create(alone, 0, MPI_COMM_WORLD, size + 5, 4, &bad), &ic[0]);
    printf("%d: an inter-communicator's remote leader out of range: class %d, null %d\n", rank, ic[0],
           bad == MPI_COMM_NULL);
    MPI_Comm_free(&alone);
    /* Distributed arrays MPI-3.1 4.1.4 calls erroneous: a grid of other than `size`
     * processes, an undistributed dimension spread over 2. */
    int dg[2] = {4, 6}, dd[2] = {MPI_DISTRIBUTE_BLOCK, MPI_DISTRIBUTE_CYCLIC}, dn[2] = {MPI_DISTRIBUTE_NONE, MPI_DISTRIBUTE_NONE};
    int da[2] = {MPI_DISTRIBUTE_DFLT_DARG, MPI_DISTRIBUTE_DFLT_DARG}, dp[2] = {2, 2};
    MPI_Datatype dt = MPI_DATATYPE_NULL, dt2 = MPI_DATATYPE_NULL;
    MPI_Error_class(MPI_Type_create_darray(5, 0, 2, dg, dd, da, dp, MPI_ORDER_C, MPI_INT, &dt), &ic[0]);
    MPI_Error_class(MPI_Type_create_darray(4, 0, 2, dg, dn, da, dp, MPI_ORDER_C, MPI_INT, &dt2), &ic[1]);
    printf("%d: a darray of a grid of 4 for 5 processes: class %d; undistributed over 2: class %d; null %d %d\n", rank,
           ic[0], ic[1], dt == MPI_DATATYPE_NULL, dt2 == MPI_DATATYPE_NULL);
    /* A null status to convert. */
    MPI_Fint fst[MPI_F_STATUS_SIZE];
    MPI_Error_class(MPI_Status_c2f(NULL, fst), &ic[0]);
    MPI_Error_class(MPI_Status_f2c(NULL, MPI_STATUS_IGNORE), &ic[1]);
    printf("%d: a null status to Fortran: class %d, from Fortran: class %d\n", rank, ic[0], ic[1]);
    /* Generalized requests. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Request g, kept;
    MPI_Status gst;
    MPI_Grequest_start(g_query, g_free, g_cancel, NULL, &g);
    MPI_Grequest_complete(g);
    MPI_Error_class(MPI_Grequest_complete(g), &ic[0]);
    MPI_Wait(&g, MPI_STATUS_IGNORE);
    printf("%d: a generalized request completed twice: class %d, frees %d\n", rank, ic[0], g_frees[0]);
    MPI_Grequest_start(g_query, g_free, g_cancel, NULL, &g);
    kept = g;
    MPI_Request_free(&g);
    int before = g_frees[0];
    MPI_Grequest_complete(kept);
    printf("%d: freed before it completed: frees %d then %d\n", rank, before, g_frees[0]);
    g_frees[1] = MPI_ERR_ARG;
    MPI_Grequest_start(g_query, g_free, g_cancel, NULL, &g);
    MPI_Grequest_complete(g);
    MPI_Error_class(MPI_Wait(&g, MPI_STATUS_IGNORE), &ic[0]);
    MPI_Grequest_start(g_query, g_free, g_cancel, NULL, &g);
    MPI_Grequest_complete(g);
    MPI_Error_class(MPI_Waitall(1, &g, &gst), &ic[1]);
    MPI_Error_class(gst.MPI_ERROR, &ic[2]);
    g_frees[1] = MPI_SUCCESS;
    g_code = MPI_ERR_COUNT;
    MPI_Grequest_start(g_query, g_free, g_cancel, NULL, &g);
    MPI_Grequest_complete(g);
    MPI_Error_class(MPI_Wait(&g, MPI_STATUS_IGNORE), &ic[3]);
    printf("%d: free_fn's code: wait class %d, waitall class %d, status class %d; query_fn's: class %d, frees %d\n",
           rank, ic[0], ic[1], ic[2], ic[3], g_frees[0]);
    /* Portable packing. */
    int pv[2] = {1, 2};
    long pbig = 1L << 40;
    unsigned char pbuf[8];
    MPI_Aint ppos[4] = {0, 0, 0, 0};
    MPI_Error_class(MPI_Pack_external("native", pv, 2, MPI_INT, pbuf, 8, &ppos[0]), &ic[0]);
    MPI_Error_class(MPI_Pack_external("external32", pv, 2, MPI_INT, pbuf, 4, &ppos[1]), &ic[1]);
    MPI_Error_class(MPI_Unpack_external("external32", pbuf, 4, &ppos[2], pv, 2, MPI_INT), &ic[2]);
    MPI_Error_class(MPI_Pack_external("external32", &pbig, 1, MPI_LONG, pbuf, 8, &ppos[3]), &ic[3]);
    printf("%d: external32: native class %d, too small %d, unpacked past the end %d, a long of 2^40 %d; positions %ld "
           "%ld %ld %ld\n",
           rank, ic[0], ic[1], ic[2], ic[3], (long)ppos[0], (long)ppos[1], (long)ppos[2], (long)ppos[3]);
    /* Fortran's CHARACTER takes no operation. */
    char chars[2] = {'a', 'b'}, cmax[2] = {'-', '-'};
    MPI_Error_class(MPI_Allreduce(chars, cmax, 2, MPI_CHARACTER, MPI_MAX, MPI_COMM_WORLD), &ic[0]);
    printf("%d: max of CHARACTERs: class %d, result %c%c\n", rank, ic[0], cmax[0], cmax[1]);
    MPI_Win_free(&win);
    MPI_Finalize();
    return 0;
}
