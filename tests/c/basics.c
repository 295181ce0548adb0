/* The C ABI's environment, point-to-point, collectives and error classes, printed as
 * "rank: what = value" lines. The test builds it with mprcc and with MPICH's mpicc and runs
 * each with 3 ranks: the two outputs, sorted, must be the same. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <wchar.h>

#include "say.h"

static void environment(void)
{
    int flag, v, sv, provided, len;
    char name[MPI_MAX_PROCESSOR_NAME], version[MPI_MAX_LIBRARY_VERSION_STRING];
    MPI_Initialized(&flag);
    SAY("initialized = %d", flag);
    MPI_Finalized(&flag);
    SAY("finalized = %d", flag);
    MPI_Get_version(&v, &sv);
    SAY("version matches mpi.h = %d", v == MPI_VERSION && sv == MPI_SUBVERSION);
    MPI_Query_thread(&provided);
    SAY("thread level = %d", provided);
    MPI_Is_thread_main(&flag);
    SAY("thread main = %d", flag);
    MPI_Get_processor_name(name, &len);
    SAY("processor name ok = %d", len > 0 && (int)strlen(name) == len);
    MPI_Get_library_version(version, &len);
    SAY("library version ok = %d", len > 0 && (int)strlen(version) == len);
    double t0 = MPI_Wtime(), t1 = MPI_Wtime();
    SAY("wtime ok = %d, wtick ok = %d", t1 >= t0, MPI_Wtick() > 0 && MPI_Wtick() < 1);
    MPI_Comm_rank(MPI_COMM_SELF, &v);
    MPI_Comm_size(MPI_COMM_SELF, &sv);
    SAY("self = %d of %d", v, sv);
    MPI_Datatype types[] = {MPI_CHAR,       MPI_SIGNED_CHAR,   MPI_UNSIGNED_CHAR, MPI_BYTE,   MPI_SHORT,
                            MPI_UNSIGNED_SHORT, MPI_INT,       MPI_UNSIGNED,      MPI_LONG,   MPI_UNSIGNED_LONG,
                            MPI_LONG_LONG,  MPI_UNSIGNED_LONG_LONG, MPI_FLOAT,    MPI_DOUBLE, MPI_WCHAR,
                            MPI_C_BOOL,     MPI_INT8_T,        MPI_INT16_T,       MPI_INT32_T, MPI_INT64_T,
                            MPI_UINT8_T,    MPI_UINT16_T,      MPI_UINT32_T,      MPI_UINT64_T, MPI_AINT,
                            MPI_OFFSET,     MPI_COUNT,         MPI_PACKED};
    for (unsigned i = 0; i < sizeof types / sizeof types[0]; i++) {
        MPI_Type_size(types[i], &len);
        SAY("type %u size = %d", i, len);
    }
}

static void point_to_point(void)
{
    int next = (rank + 1) % size, prev = (rank + size - 1) % size, count;
    int out[4] = {rank, rank * 10, rank * 100, -rank}, in[4] = {0};
    MPI_Status st;
    /* A ring: even ranks send first. */
    if (rank % 2 == 0) {
        MPI_Send(out, 4, MPI_INT, next, 7, MPI_COMM_WORLD);
        MPI_Recv(in, 4, MPI_INT, prev, 7, MPI_COMM_WORLD, &st);
    } else {
        MPI_Recv(in, 4, MPI_INT, prev, 7, MPI_COMM_WORLD, &st);
        MPI_Send(out, 4, MPI_INT, next, 7, MPI_COMM_WORLD);
    }
    MPI_Get_count(&st, MPI_INT, &count);
    SAY("ring got %d %d %d %d from %d tag %d count %d", in[0], in[1], in[2], in[3], st.MPI_SOURCE, st.MPI_TAG, count);
    MPI_Get_count(&st, MPI_DOUBLE, &count);
    SAY("ring count as doubles = %d", count);
    /* Sendrecv the other way, with a wildcard source, then a wildcard tag (from one source,
     * whose messages arrive in order). */
    double d = rank + 0.5, e = 0;
    MPI_Sendrecv(&d, 1, MPI_DOUBLE, prev, 3, &e, 1, MPI_DOUBLE, MPI_ANY_SOURCE, 3, MPI_COMM_WORLD, &st);
    SAY("sendrecv got %.1f from %d tag %d", e, st.MPI_SOURCE, st.MPI_TAG);
    MPI_Sendrecv(&d, 1, MPI_DOUBLE, prev, 4, &e, 1, MPI_DOUBLE, next, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
    SAY("sendrecv got %.1f from %d tag %d", e, st.MPI_SOURCE, st.MPI_TAG);
    /* MPI_PROC_NULL: nothing moves, the status says so. */
    MPI_Sendrecv(&d, 1, MPI_DOUBLE, MPI_PROC_NULL, 3, &e, 1, MPI_DOUBLE, MPI_PROC_NULL, 3, MPI_COMM_WORLD, &st);
    MPI_Get_count(&st, MPI_DOUBLE, &count);
    SAY("proc null: source %d tag %d count %d", st.MPI_SOURCE == MPI_PROC_NULL, st.MPI_TAG == MPI_ANY_TAG, count);
    /* Probe, then receive what it found. */
    if (rank == 0) {
        for (int r = 1; r < size; r++) {
            int flag = 0;
            MPI_Probe(MPI_ANY_SOURCE, 11, MPI_COMM_WORLD, &st);
            MPI_Get_count(&st, MPI_CHAR, &count);
            char text[64] = {0};
            MPI_Recv(text, count, MPI_CHAR, st.MPI_SOURCE, 11, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            SAY("probed %d chars: %s", count, text);
            MPI_Iprobe(MPI_ANY_SOURCE, 12, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
            if (flag)
                SAY("iprobe found a message it should not have");
        }
    } else {
        char text[64];
        snprintf(text, sizeof text, "hello from rank %d", rank);
        MPI_Send(text, (int)strlen(text), MPI_CHAR, 0, 11, MPI_COMM_WORLD);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

static void collectives(void)
{
    double v[3] = {0};
    if (rank == 1)
        v[0] = 1.25, v[1] = -2, v[2] = 1e10;
    MPI_Bcast(v, 3, MPI_DOUBLE, 1, MPI_COMM_WORLD);
    SAY("bcast %.2f %.1f %.0f", v[0], v[1], v[2]);
    int i = rank + 1, sum = -1;
    MPI_Reduce(&i, &sum, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0)
        SAY("reduce sum = %d", sum);
    MPI_Op ops[] = {MPI_MAX, MPI_MIN, MPI_SUM, MPI_PROD, MPI_LAND, MPI_BAND, MPI_LOR, MPI_BOR, MPI_LXOR, MPI_BXOR};
    for (unsigned k = 0; k < sizeof ops / sizeof ops[0]; k++) {
        int x[2] = {rank + 3, rank % 2}, y[2];
        MPI_Allreduce(x, y, 2, MPI_INT, ops[k], MPI_COMM_WORLD);
        unsigned long long ux = (unsigned long long)rank * 6 + 5, uy;
        MPI_Allreduce(&ux, &uy, 1, MPI_UNSIGNED_LONG_LONG, ops[k], MPI_COMM_WORLD);
        signed char cx = (signed char)(rank - 2), cy;
        MPI_Allreduce(&cx, &cy, 1, MPI_SIGNED_CHAR, ops[k], MPI_COMM_WORLD);
        short sx = (short)(rank * 300 + 7), sy;
        MPI_Allreduce(&sx, &sy, 1, MPI_SHORT, ops[k], MPI_COMM_WORLD);
        SAY("op %u int %d %d ull %llu schar %d short %d", k, y[0], y[1], uy, cy, sy);
    }
    for (unsigned k = 0; k < 4; k++) {
        float f = rank * 1.5f - 1, g;
        double d[2] = {rank * 0.25, -rank - 0.5}, e[2];
        MPI_Allreduce(&f, &g, 1, MPI_FLOAT, ops[k], MPI_COMM_WORLD);
        MPI_Allreduce(d, e, 2, MPI_DOUBLE, ops[k], MPI_COMM_WORLD);
        SAY("op %u float %.3f double %.3f %.3f", k, g, e[0], e[1]);
    }
    /* Buffers not aligned for their elements (fields of a packed record). */
    {
        unsigned char in[1 + 2 * sizeof(double)], out[3 + 2 * sizeof(double)];
        double d[2] = {rank + 0.5, -2.0 * rank}, e[2];
        memcpy(in + 1, d, sizeof d);
        MPI_Allreduce(in + 1, out + 3, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        memcpy(e, out + 3, sizeof e);
        SAY("unaligned sum %.2f %.2f", e[0], e[1]);
    }
    /* In place: everywhere for all-reduce, at the root for reduce. */
    long l[3] = {rank, 2 * rank, 1L << 40};
    MPI_Allreduce(MPI_IN_PLACE, l, 3, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    SAY("allreduce in place %ld %ld %ld", l[0], l[1], l[2]);
    double m = rank * 2.0;
    if (rank == 2)
        MPI_Reduce(MPI_IN_PLACE, &m, 1, MPI_DOUBLE, MPI_MAX, 2, MPI_COMM_WORLD);
    else
        MPI_Reduce(&m, NULL, 1, MPI_DOUBLE, MPI_MAX, 2, MPI_COMM_WORLD);
    if (rank == 2)
        SAY("reduce in place max = %.1f", m);
    /* A long vector: the collectives split it, between elements. */
    static double big[100003], bigsum[100003];
    for (int k = 0; k < 100003; k++)
        big[k] = k % 7 + rank;
    MPI_Allreduce(big, bigsum, 100003, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    int good = 1;
    for (int k = 0; k < 100003; k++)
        good &= bigsum[k] == 3.0 * (k % 7) + 3;
    SAY("long allreduce ok = %d", good);
}

static void errors(void)
{
    int err, eclass, len, x = 1, y[2];
    char text[MPI_MAX_ERROR_STRING];
    MPI_Status st;
    MPI_Errhandler h;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
    MPI_Comm_get_errhandler(MPI_COMM_WORLD, &h);
    SAY("errhandler is errors-return = %d", h == MPI_ERRORS_RETURN);
#define CLASS(what, call)                                                                                              \
    do {                                                                                                               \
        err = (call);                                                                                                  \
        MPI_Error_class(err, &eclass);                                                                                  \
        MPI_Error_string(err, text, &len);                                                                             \
        SAY("%s: class %d, text ok %d", what, eclass, len > 0 && (int)strlen(text) == len);                             \
    } while (0)
    CLASS("send to rank size", MPI_Send(&x, 1, MPI_INT, size, 0, MPI_COMM_WORLD));
    CLASS("send to rank -5", MPI_Send(&x, 1, MPI_INT, -5, 0, MPI_COMM_WORLD));
    CLASS("negative tag", MPI_Send(&x, 1, MPI_INT, 0, -3, MPI_COMM_WORLD));
    CLASS("negative count", MPI_Send(&x, -1, MPI_INT, 0, 0, MPI_COMM_WORLD));
    /* The same checks on the short paths of a send or receive of a predefined type. */
    MPI_Request rq = MPI_REQUEST_NULL;
    CLASS("send of a null buffer", MPI_Send(NULL, 1, MPI_INT, 0, 0, MPI_COMM_WORLD));
    CLASS("receive into a null buffer", MPI_Recv(NULL, 1, MPI_INT, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    CLASS("receive from rank -5", MPI_Recv(&x, 1, MPI_INT, -5, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    CLASS("receive of a negative count", MPI_Recv(&x, -1, MPI_INT, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    CLASS("isend of a null buffer", MPI_Isend(NULL, 1, MPI_INT, 0, 0, MPI_COMM_WORLD, &rq));
    CLASS("irecv from rank size", MPI_Irecv(&x, 1, MPI_INT, size, 0, MPI_COMM_WORLD, &rq));
    CLASS("irecv of a negative count", MPI_Irecv(&x, -1, MPI_INT, 0, 0, MPI_COMM_WORLD, &rq));
    SAY("no request made by them: %d", rq == MPI_REQUEST_NULL);
    CLASS("null communicator", MPI_Send(&x, 1, MPI_INT, 0, 0, MPI_COMM_NULL));
    CLASS("null datatype", MPI_Send(&x, 1, MPI_DATATYPE_NULL, 0, 0, MPI_COMM_WORLD));
    CLASS("bcast root size", MPI_Bcast(&x, 1, MPI_INT, size, MPI_COMM_WORLD));
    /* The short paths of the collectives of predefined types give the same. */
    CLASS("bcast root -1", MPI_Bcast(&x, 1, MPI_INT, -1, MPI_COMM_SELF));
    CLASS("bcast of a null buffer", MPI_Bcast(NULL, 1, MPI_INT, 0, MPI_COMM_SELF));
    CLASS("allgather into a null buffer", MPI_Allgather(&x, 1, MPI_INT, NULL, 1, MPI_INT, MPI_COMM_SELF));
    CLASS("allgather of a negative count", MPI_Allgather(&x, -1, MPI_INT, y, 1, MPI_INT, MPI_COMM_SELF));
    CLASS("alltoall of a null datatype", MPI_Alltoall(&x, 1, MPI_DATATYPE_NULL, y, 1, MPI_INT, MPI_COMM_SELF));
    CLASS("alltoall on a null communicator", MPI_Alltoall(&x, 1, MPI_INT, y, 1, MPI_INT, MPI_COMM_NULL));
    int wone[1] = {1}, wneg[1] = {-1}, wzero[1] = {0};
    MPI_Datatype wnull[1] = {MPI_DATATYPE_NULL}, wint[1] = {MPI_INT};
    CLASS("alltoallw of a null datatype", MPI_Alltoallw(&x, wone, wzero, wnull, y, wone, wzero, wint, MPI_COMM_SELF));
    CLASS("alltoallw of a negative count", MPI_Alltoallw(&x, wneg, wzero, wint, y, wone, wzero, wint, MPI_COMM_SELF));
    CLASS("band on doubles", MPI_Allreduce(&x, y, 1, MPI_DOUBLE, MPI_BAND, MPI_COMM_SELF));
    CLASS("null op", MPI_Allreduce(&x, y, 1, MPI_INT, MPI_OP_NULL, MPI_COMM_SELF));
    /* Bytes take the bitwise operations only, booleans the logical ones only. */
    unsigned char b1[2] = {0x0f, 1}, b2[2] = {0xf0, 0}, b3[2];
    CLASS("sum of bytes", MPI_Allreduce(b1, b3, 2, MPI_BYTE, MPI_SUM, MPI_COMM_SELF));
    CLASS("max of bytes", MPI_Reduce_local(b1, b2, 2, MPI_BYTE, MPI_MAX));
    CLASS("band of booleans", MPI_Allreduce(b1, b3, 2, MPI_C_BOOL, MPI_BAND, MPI_COMM_SELF));
    CLASS("sum of booleans", MPI_Reduce_local(b1, b2, 2, MPI_C_BOOL, MPI_SUM));
    MPI_Request ob;
    CLASS("iallreduce sum of bytes", MPI_Iallreduce(b1, b3, 2, MPI_BYTE, MPI_SUM, MPI_COMM_SELF, &ob));
    CLASS("bxor of bytes", MPI_Reduce_local(b1, b2, 2, MPI_BYTE, MPI_BXOR));
    MPI_Comm nodup = MPI_COMM_NULL;
    MPI_Request noreq = MPI_REQUEST_NULL;
    CLASS("idup without a request", MPI_Comm_idup(MPI_COMM_WORLD, &nodup, NULL));
    CLASS("idup without a communicator", MPI_Comm_idup(MPI_COMM_WORLD, NULL, &noreq));
    CLASS("idup of MPI_COMM_NULL", MPI_Comm_idup(MPI_COMM_NULL, &nodup, &noreq));
    SAY("failed idups left null: %d %d", nodup == MPI_COMM_NULL, noreq == MPI_REQUEST_NULL);
    SAY("bxor of bytes = %d %d", b2[0], b2[1]);
    b2[0] = 0;
    b2[1] = 1;
    CLASS("lor of booleans", MPI_Reduce_local(b1, b2, 2, MPI_C_BOOL, MPI_LOR));
    SAY("lor of booleans = %d %d", b2[0], b2[1]);
    CLASS("all-reduce of one buffer into itself", MPI_Allreduce(y, y, 1, MPI_INT, MPI_SUM, MPI_COMM_SELF));
    CLASS("reduce of one buffer into itself", MPI_Reduce(y, y, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_SELF));
    /* Ranges of ranks: a stride of 0, past the group's end, below 0, a rank twice. */
    MPI_Group wg, none = MPI_GROUP_NULL;
    MPI_Comm_group(MPI_COMM_WORLD, &wg);
    int stride0[1][3] = {{0, 1, 0}}, past[1][3] = {{0, size, 1}}, below[1][3] = {{-1, 0, 1}};
    int twice[2][3] = {{0, 1, 1}, {1, 1, 1}};
    CLASS("range of stride 0", MPI_Group_range_incl(wg, 1, stride0, &none));
    CLASS("range past the end", MPI_Group_range_incl(wg, 1, past, &none));
    CLASS("range below 0", MPI_Group_range_excl(wg, 1, below, &none));
    CLASS("ranges naming a rank twice", MPI_Group_range_incl(wg, 2, twice, &none));
    CLASS("name of no datatype", MPI_Type_set_name(MPI_DATATYPE_NULL, "x"));
    MPI_Group_free(&wg);
    /* Truncation: two ints into room for one. */
    int two[2] = {1, 2};
    err = MPI_Sendrecv(two, 2, MPI_INT, rank, 5, y, 1, MPI_INT, rank, 5, MPI_COMM_WORLD, &st);
    MPI_Error_class(err, &eclass);
    SAY("truncated receive: class %d", eclass);
    CLASS("success", MPI_SUCCESS);
    SAY("classes: rank %d tag %d count %d comm %d type %d root %d op %d truncate %d", MPI_ERR_RANK, MPI_ERR_TAG,
        MPI_ERR_COUNT, MPI_ERR_COMM, MPI_ERR_TYPE, MPI_ERR_ROOT, MPI_ERR_OP, MPI_ERR_TRUNCATE);
}

/* Error handlers of the program's: called with the object and the code, the call then
 * returning the code; kept by the objects they are set on after MPI_Errhandler_free. */
static int handled, handled_class, handled_self;
static MPI_Comm handled_comm;
static MPI_Win handled_win;

static void on_comm_error(MPI_Comm *comm, int *code, ...)
{
    handled++;
    MPI_Error_class(*code, &handled_class);
    handled_self = *comm == handled_comm;
}

static void on_win_error(MPI_Win *win, int *code, ...)
{
    handled++;
    handled_class = *code;
    handled_self = *win == handled_win;
}

static void handlers(void)
{
    int x = 1, err, cls;
    MPI_Errhandler h, got;
    MPI_Comm_dup(MPI_COMM_WORLD, &handled_comm);
    MPI_Comm_create_errhandler(on_comm_error, &h);
    MPI_Comm_set_errhandler(handled_comm, h);
    MPI_Comm_get_errhandler(handled_comm, &got);
    err = MPI_Send(&x, 1, MPI_INT, size, 0, handled_comm);
    MPI_Error_class(err, &cls);
    SAY("handler: same handle %d, called %d, class %d, on its communicator %d, returned class %d", got == h, handled,
        handled_class, handled_self, cls);
    err = MPI_Comm_call_errhandler(handled_comm, MPI_ERR_OTHER);
    SAY("call_errhandler: %d, called %d, class %d", err, handled, handled_class);
    MPI_Errhandler_free(&h);
    err = MPI_Send(&x, -1, MPI_INT, 0, 0, handled_comm);
    MPI_Error_class(err, &cls);
    SAY("after free: null %d, called %d, class %d", h == MPI_ERRHANDLER_NULL, handled, cls);
    MPI_Comm_free(&handled_comm);
    /* A window's: on the code the program passes. */
    void *base;
    MPI_Win_allocate(8, 1, MPI_INFO_NULL, MPI_COMM_SELF, &base, &handled_win);
    MPI_Win_create_errhandler(on_win_error, &h);
    MPI_Win_set_errhandler(handled_win, h);
    err = MPI_Win_call_errhandler(handled_win, MPI_ERR_WIN);
    SAY("window handler: %d, called %d, code %d, on its window %d", err, handled, handled_class, handled_self);
    MPI_Errhandler wh;
    MPI_Win_get_errhandler(handled_win, &wh);
    int same = wh == h;
    MPI_Errhandler_free(&wh);
    SAY("window handler taken: same %d, reference freed %d", same, wh == MPI_ERRHANDLER_NULL);
    MPI_Win_free(&handled_win);
    MPI_Errhandler_free(&h);
    /* MPI_ERRORS_RETURN: the call returns, nothing else happens. */
    err = MPI_Comm_call_errhandler(MPI_COMM_WORLD, MPI_ERR_OTHER);
    SAY("call_errhandler under errors-return: %d, called %d", err, handled);
    /* The idiom of libraries: take the handler, put it back later, free the reference. */
    MPI_Comm_get_errhandler(MPI_COMM_WORLD, &got);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, got);
    err = MPI_Errhandler_free(&got);
    SAY("free of a predefined handler taken: %d, null %d", err, got == MPI_ERRHANDLER_NULL);
}

static void info(void)
{
    MPI_Info in, copy;
    char value[MPI_MAX_INFO_VAL + 1], key[MPI_MAX_INFO_KEY + 1];
    int flag, n, len;
    MPI_Info_create(&in);
    MPI_Info_set(in, "alpha", "1");
    MPI_Info_set(in, "beta", "two words");
    MPI_Info_set(in, "alpha", "replaced");
    MPI_Info_get_nkeys(in, &n);
    SAY("info keys = %d", n);
    for (int i = 0; i < n; i++) {
        MPI_Info_get_nthkey(in, i, key);
        MPI_Info_get(in, key, MPI_MAX_INFO_VAL, value, &flag);
        SAY("info %d: %s = %s (%d)", i, key, value, flag);
    }
    MPI_Info_get_valuelen(in, "beta", &len, &flag);
    SAY("info valuelen of beta = %d (%d)", len, flag);
    MPI_Info_get(in, "beta", 3, value, &flag);
    SAY("info beta cut to 3 = %s", value);
    MPI_Info_get(in, "gamma", MPI_MAX_INFO_VAL, value, &flag);
    SAY("info gamma found = %d", flag);
    MPI_Info_dup(in, &copy);
    MPI_Info_delete(in, "alpha");
    MPI_Info_get_nkeys(in, &n);
    int m;
    MPI_Info_get_nkeys(copy, &m);
    SAY("info after delete = %d, the copy keeps = %d", n, m);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int err = MPI_Info_delete(in, "alpha"), cls;
    MPI_Error_class(err, &cls);
    SAY("info delete of a missing key: class %d", cls);
    /* Hints on a communicator and a window: taken; the info in use is a new object. */
    MPI_Info used = MPI_INFO_NULL, wused = MPI_INFO_NULL;
    MPI_Comm hinted;
    int codes[5], hs, ws;
    void *wbase;
    MPI_Win hw;
    codes[0] = MPI_Comm_set_info(MPI_COMM_WORLD, in);
    codes[1] = MPI_Comm_get_info(MPI_COMM_WORLD, &used);
    codes[2] = MPI_Comm_dup_with_info(MPI_COMM_WORLD, in, &hinted);
    MPI_Comm_size(hinted, &hs);
    MPI_Win_allocate(8, 1, MPI_INFO_NULL, MPI_COMM_SELF, &wbase, &hw);
    codes[3] = MPI_Win_set_info(hw, in);
    codes[4] = MPI_Win_get_info(hw, &wused);
    ws = used != MPI_INFO_NULL && wused != MPI_INFO_NULL;
    SAY("hints: codes %d %d %d %d %d, dup size %d, info in use made %d", codes[0], codes[1], codes[2], codes[3],
        codes[4], hs, ws);
    MPI_Info_free(&used);
    MPI_Info_free(&wused);
    MPI_Win_free(&hw);
    MPI_Comm_free(&hinted);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    MPI_Info_free(&in);
    MPI_Info_free(&copy);
    SAY("info freed = %d", in == MPI_INFO_NULL && copy == MPI_INFO_NULL);
}

/* Every predefined integer type: a ring of messages, then a sum and a maximum over the ranks
 * (bytes by a bitwise or, booleans by a logical or; characters are moved only). */
#define RING_AND_REDUCE(T, MT, SUM, MAX)                                                                               \
    do {                                                                                                               \
        T v[2] = {(T)(rank + 1), (T)(100 - rank)}, got[2] = {0, 0}, sum[2] = {0, 0}, max[2] = {0, 0};                   \
        MPI_Sendrecv(v, 2, MT, next, 40, got, 2, MT, prev, 40, MPI_COMM_WORLD, MPI_STATUS_IGNORE);                      \
        if (SUM != MPI_OP_NULL) {                                                                                      \
            MPI_Allreduce(v, sum, 2, MT, SUM, MPI_COMM_WORLD);                                                         \
            MPI_Allreduce(v, max, 2, MT, MAX, MPI_COMM_WORLD);                                                         \
        }                                                                                                              \
        SAY("%s: from prev %lld %lld, sum %lld %lld, max %lld %lld", #MT, (long long)got[0], (long long)got[1],          \
            (long long)sum[0], (long long)sum[1], (long long)max[0], (long long)max[1]);                               \
    } while (0)

static void integer_types(void)
{
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    RING_AND_REDUCE(signed char, MPI_SIGNED_CHAR, MPI_SUM, MPI_MAX);
    RING_AND_REDUCE(unsigned char, MPI_UNSIGNED_CHAR, MPI_SUM, MPI_MAX);
    RING_AND_REDUCE(short, MPI_SHORT, MPI_SUM, MPI_MAX);
    RING_AND_REDUCE(unsigned short, MPI_UNSIGNED_SHORT, MPI_SUM, MPI_MAX);
    RING_AND_REDUCE(unsigned, MPI_UNSIGNED, MPI_SUM, MPI_MAX);
    RING_AND_REDUCE(long, MPI_LONG, MPI_SUM, MPI_MAX);
    RING_AND_REDUCE(unsigned long, MPI_UNSIGNED_LONG, MPI_SUM, MPI_MAX);
    RING_AND_REDUCE(long long, MPI_LONG_LONG, MPI_SUM, MPI_MAX);
    RING_AND_REDUCE(unsigned long long, MPI_UNSIGNED_LONG_LONG, MPI_SUM, MPI_MAX);
    RING_AND_REDUCE(int8_t, MPI_INT8_T, MPI_SUM, MPI_MAX);
    RING_AND_REDUCE(int16_t, MPI_INT16_T, MPI_SUM, MPI_MAX);
    RING_AND_REDUCE(int32_t, MPI_INT32_T, MPI_SUM, MPI_MAX);
    RING_AND_REDUCE(int64_t, MPI_INT64_T, MPI_SUM, MPI_MAX);
    RING_AND_REDUCE(uint8_t, MPI_UINT8_T, MPI_SUM, MPI_MAX);
    RING_AND_REDUCE(uint16_t, MPI_UINT16_T, MPI_SUM, MPI_MAX);
    RING_AND_REDUCE(uint32_t, MPI_UINT32_T, MPI_SUM, MPI_MAX);
    RING_AND_REDUCE(uint64_t, MPI_UINT64_T, MPI_SUM, MPI_MAX);
    RING_AND_REDUCE(MPI_Aint, MPI_AINT, MPI_SUM, MPI_MAX);
    RING_AND_REDUCE(MPI_Offset, MPI_OFFSET, MPI_SUM, MPI_MAX);
    RING_AND_REDUCE(MPI_Count, MPI_COUNT, MPI_SUM, MPI_MAX);
    RING_AND_REDUCE(unsigned char, MPI_BYTE, MPI_BOR, MPI_BAND);
    RING_AND_REDUCE(unsigned char, MPI_C_BOOL, MPI_LOR, MPI_LAND);
    RING_AND_REDUCE(char, MPI_CHAR, MPI_SUM, MPI_MAX);
    RING_AND_REDUCE(wchar_t, MPI_WCHAR, MPI_OP_NULL, MPI_OP_NULL);
}

/* Handles and statuses through Fortran's integers and back (MPI_Comm_c2f ... MPI_Status_f2c). */
static void fortran_handles(void)
{
    MPI_Comm world = MPI_Comm_f2c(MPI_Comm_c2f(MPI_COMM_WORLD));
    MPI_Datatype ty = MPI_Type_f2c(MPI_Type_c2f(MPI_DOUBLE));
    MPI_Group g;
    MPI_Comm_group(world, &g);
    MPI_Op op = MPI_Op_f2c(MPI_Op_c2f(MPI_MAX));
    MPI_Info info;
    MPI_Info_create(&info);
    MPI_Errhandler eh = MPI_Errhandler_f2c(MPI_Errhandler_c2f(MPI_ERRORS_RETURN));
    int same = MPI_Group_f2c(MPI_Group_c2f(g)) == g && MPI_Info_f2c(MPI_Info_c2f(info)) == info &&
               MPI_Win_f2c(MPI_Win_c2f(MPI_WIN_NULL)) == MPI_WIN_NULL && eh == MPI_ERRORS_RETURN;
    double mine = rank, most = -1;
    MPI_Allreduce(&mine, &most, 1, ty, op, world);
    int n = -1;
    MPI_Comm_size(world, &n);
    SAY("through fortran: same %d, size %d, max %g", same, n, most);
    MPI_Group_free(&g);
    MPI_Info_free(&info);

    /* A message to the next rank: its request, matched message and status through Fortran. */
    int next = (rank + 1) % size, prev = (rank + size - 1) % size, v = 100 + rank, got = -1;
    MPI_Request req;
    MPI_Isend(&v, 1, MPI_INT, next, 31, MPI_COMM_WORLD, &req);
    MPI_Message msg;
    MPI_Status st, back;
    MPI_Mprobe(prev, 31, MPI_COMM_WORLD, &msg, &st);
    MPI_Message through = MPI_Message_f2c(MPI_Message_c2f(msg));
    MPI_Mrecv(&got, 1, MPI_INT, &through, &st);
    MPI_Request r = MPI_Request_f2c(MPI_Request_c2f(req));
    MPI_Wait(&r, MPI_STATUS_IGNORE);
    MPI_Fint f[MPI_F_STATUS_SIZE];
    int rc = MPI_Status_c2f(&st, f);
    rc |= MPI_Status_f2c(f, &back);
    int count = -1;
    MPI_Get_count(&back, MPI_INT, &count);
    SAY("status through fortran: rc %d, got %d, source %d, tag %d, back %d %d, count %d", rc, got, f[MPI_F_SOURCE],
        f[MPI_F_TAG], back.MPI_SOURCE, back.MPI_TAG, count);
}

int main(int argc, char **argv)
{
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    SAY("size = %d, provided = %d", size, provided);
    environment();
    point_to_point();
    collectives();
    integer_types();
    errors();
    handlers();
    info();
    fortran_handles();
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    int flag;
    MPI_Finalized(&flag);
    SAY("finalized after = %d", flag);
    return 0;
}
