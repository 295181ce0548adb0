/* The C ABI's one-sided communication: windows made every way, put, get, accumulates,
 * atomics, every synchronisation, and the errors they report, printed as "rank: what =
 * value" lines. The test builds it with mprcc and with MPICH's mpicc and runs each with 3
 * and 4 ranks: the outputs, sorted, must be the same. */
#include <mpi.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "say.h"

#define N 64

static int class_of(int code)
{
    int c;
    MPI_Error_class(code, &c);
    return c;
}

/* Fence epochs on a window from MPI_Win_create with a displacement unit of sizeof(int):
 * every rank puts into its right neighbour, gets from its left, and all add to rank 0. */
static void fence(void)
{
    int *mem = (int *)calloc(N, sizeof(int)), out[N], in[N];
    MPI_Win win;
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    MPI_Win_create(mem, N * sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &win);
    for (int i = 0; i < N; i++)
        out[i] = rank * 1000 + i;
    MPI_Win_fence(0, win);
    MPI_Put(out, N / 2, MPI_INT, next, N / 2, N / 2, MPI_INT, win);
    MPI_Win_fence(0, win);
    SAY("fence put: mem[32] = %d, mem[63] = %d, mem[0] = %d", mem[32], mem[63], mem[0]);
    MPI_Get(in, 4, MPI_INT, prev, N / 2, 4, MPI_INT, win);
    MPI_Win_fence(0, win);
    SAY("fence get: %d %d %d %d", in[0], in[1], in[2], in[3]);
    int one[4] = {1, rank, rank * rank, -rank};
    MPI_Accumulate(one, 4, MPI_INT, 0, 0, 4, MPI_INT, MPI_SUM, win);
    MPI_Win_fence(0, win);
    if (rank == 0)
        SAY("accumulated sums: %d %d %d %d", mem[0], mem[1], mem[2], mem[3]);
    MPI_Accumulate(&rank, 1, MPI_INT, 0, 4, 1, MPI_INT, MPI_MAX, win);
    /* Chars, which MPI leaves out of reductions and MPICH sums as C would (wrapping). */
    char c[4] = {(char)(rank + 1), (char)(100 + rank), (char)(-rank), 'A'};
    MPI_Accumulate(c, 4, MPI_CHAR, 0, 5, 4, MPI_CHAR, MPI_SUM, win);
    MPI_Win_fence(MPI_MODE_NOSUCCEED, win);
    if (rank == 0) {
        char *sum = (char *)&mem[5];
        SAY("accumulated max: %d, chars %d %d %d %d", mem[4], sum[0], sum[1], sum[2], sum[3]);
    }
    MPI_Group g;
    int gs;
    MPI_Win_get_group(win, &g);
    MPI_Group_size(g, &gs);
    MPI_Group_free(&g);
    SAY("window group size = %d", gs);
    void *base;
    MPI_Aint *wsize;
    int *unit, flag;
    MPI_Win_get_attr(win, MPI_WIN_BASE, &base, &flag);
    MPI_Win_get_attr(win, MPI_WIN_SIZE, &wsize, &flag);
    MPI_Win_get_attr(win, MPI_WIN_DISP_UNIT, &unit, &flag);
    SAY("attributes: base ok %d size %ld unit %d", base == (void *)mem, (long)*wsize, *unit);
    int *flavor, *model;
    MPI_Win_get_attr(win, MPI_WIN_CREATE_FLAVOR, &flavor, &flag);
    MPI_Win_get_attr(win, MPI_WIN_MODEL, &model, &flag);
    SAY("flavor create %d, model unified %d", *flavor == MPI_WIN_FLAVOR_CREATE, *model == MPI_WIN_UNIFIED);
    MPI_Win_free(&win);
    SAY("freed: %d", win == MPI_WIN_NULL);
    free(mem);
}

/* Passive target on an allocated window of doubles: a lock per target, lock_all with
 * flushes, get_accumulate, fetch_and_op, and a compare-and-swap ticket. */
static void passive(void)
{
    double *mem;
    MPI_Win win;
    MPI_Win_allocate(N * sizeof(double), sizeof(double), MPI_INFO_NULL, MPI_COMM_WORLD, &mem, &win);
    MPI_Win_lock(MPI_LOCK_EXCLUSIVE, rank, 0, win);
    for (int i = 0; i < N; i++)
        mem[i] = 0;
    MPI_Win_unlock(rank, win);
    MPI_Barrier(MPI_COMM_WORLD);
    /* Everyone adds rank + 0.5 to slot 0 of every rank. */
    for (int t = 0; t < size; t++) {
        double v = rank + 0.5;
        MPI_Win_lock(MPI_LOCK_SHARED, t, 0, win);
        MPI_Accumulate(&v, 1, MPI_DOUBLE, t, 0, 1, MPI_DOUBLE, MPI_SUM, win);
        MPI_Win_unlock(t, win);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Win_lock(MPI_LOCK_SHARED, rank, 0, win);
    SAY("slot 0 after every rank added = %.1f", mem[0]);
    MPI_Win_unlock(rank, win);
    MPI_Barrier(MPI_COMM_WORLD);

    MPI_Win_lock_all(0, win);
    /* A ticket counter in rank 0's slot 1, taken by fetch_and_op: each rank's ticket is
     * unique; the sum of tickets is known. */
    double inc = 1, ticket;
    MPI_Fetch_and_op(&inc, &ticket, MPI_DOUBLE, 0, 1, MPI_SUM, win);
    MPI_Win_flush(0, win);
    long tsum = (long)ticket;
    long total;
    MPI_Allreduce(&tsum, &total, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    SAY("tickets sum = %ld", total);
    /* Get_accumulate with MPI_NO_OP reads atomically; with MPI_REPLACE swaps. */
    MPI_Barrier(MPI_COMM_WORLD);
    double seen, mine = 100 + rank, old;
    MPI_Get_accumulate(NULL, 0, MPI_DOUBLE, &seen, 1, MPI_DOUBLE, 0, 1, 1, MPI_DOUBLE, MPI_NO_OP, win);
    MPI_Win_flush(0, win);
    SAY("counter read atomically = %.0f", seen);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Get_accumulate(&mine, 1, MPI_DOUBLE, &old, 1, MPI_DOUBLE, rank, 2, 1, MPI_DOUBLE, MPI_REPLACE, win);
    MPI_Win_flush_all(win);
    MPI_Get(&seen, 1, MPI_DOUBLE, rank, 2, 1, MPI_DOUBLE, win);
    MPI_Win_flush_local(rank, win);
    SAY("swap: old %.0f new %.0f", old, seen);
    MPI_Win_unlock_all(win);
    MPI_Win_free(&win);

    /* A compare-and-swap lock on an int window: each rank takes it in turn, adds to a
     * protected counter, and releases it. */
    int *lk;
    MPI_Win lw;
    MPI_Win_allocate(2 * sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &lk, &lw);
    MPI_Win_lock(MPI_LOCK_EXCLUSIVE, rank, 0, lw);
    lk[0] = lk[1] = 0;
    MPI_Win_unlock(rank, lw);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Win_lock_all(0, lw);
    int free_ = 0, me = rank + 1, prev = -1;
    do {
        MPI_Compare_and_swap(&me, &free_, &prev, MPI_INT, 0, 0, lw);
        MPI_Win_flush(0, lw);
    } while (prev != 0);
    int c, one = 1;
    MPI_Get(&c, 1, MPI_INT, 0, 1, 1, MPI_INT, lw);
    MPI_Win_flush(0, lw);
    c += 1;
    MPI_Put(&c, 1, MPI_INT, 0, 1, 1, MPI_INT, lw);
    MPI_Win_flush(0, lw);
    MPI_Compare_and_swap(&free_, &me, &prev, MPI_INT, 0, 0, lw);
    MPI_Win_flush(0, lw);
    SAY("released my own lock = %d", prev == me);
    (void)one;
    MPI_Win_unlock_all(lw);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, lw);
        SAY("counter under the lock = %d", lk[1]);
        MPI_Win_unlock(0, lw);
    }
    MPI_Win_free(&lw);
}

/* General active target (post/start/complete/wait) between neighbours, on a dynamic
 * window whose memory is attached and whose address travels by message. */
static void pscw_dynamic(void)
{
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    int *mem = (int *)calloc(8, sizeof(int));
    MPI_Win win;
    MPI_Win_create_dynamic(MPI_INFO_NULL, MPI_COMM_WORLD, &win);
    MPI_Win_attach(win, mem, 8 * sizeof(int));
    int *flavor, known;
    MPI_Win_get_attr(win, MPI_WIN_CREATE_FLAVOR, &flavor, &known);
    SAY("flavor dynamic %d", known && *flavor == MPI_WIN_FLAVOR_DYNAMIC);
    MPI_Aint mine, theirs;
    MPI_Get_address(mem, &mine);
    MPI_Sendrecv(&mine, 1, MPI_AINT, prev, 0, &theirs, 1, MPI_AINT, next, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Group world, to, from;
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    MPI_Group_incl(world, 1, &next, &to);
    MPI_Group_incl(world, 1, &prev, &from);
    MPI_Win_post(from, 0, win);
    MPI_Win_start(to, 0, win);
    int v[2] = {rank * 7, rank * 7 + 1};
    MPI_Put(v, 2, MPI_INT, next, theirs + 3 * (MPI_Aint)sizeof(int), 2, MPI_INT, win);
    MPI_Win_complete(win);
    MPI_Win_wait(win);
    SAY("pscw into dynamic memory: %d %d (others %d)", mem[3], mem[4], mem[0] + mem[7]);
    MPI_Win_post(from, 0, win);
    MPI_Win_start(to, 0, win);
    int got[2];
    MPI_Get(got, 2, MPI_INT, next, theirs + 3 * (MPI_Aint)sizeof(int), 2, MPI_INT, win);
    MPI_Win_complete(win);
    int flag = 0;
    while (!flag)
        MPI_Win_test(win, &flag);
    SAY("pscw get back: %d %d", got[0], got[1]);
    MPI_Win_detach(win, mem);
    MPI_Win_free(&win);
    MPI_Group_free(&to);
    MPI_Group_free(&from);
    MPI_Group_free(&world);
    free(mem);
}

/* A shared window: every rank of the node writes its part, then reads its neighbour's
 * through a pointer from MPI_Win_shared_query. */
static void shared(void)
{
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    int nr, ns;
    MPI_Comm_rank(node, &nr);
    MPI_Comm_size(node, &ns);
    long *mine;
    MPI_Win win;
    MPI_Win_allocate_shared(4 * sizeof(long), sizeof(long), MPI_INFO_NULL, node, &mine, &win);
    int *flavor, flag;
    MPI_Win_get_attr(win, MPI_WIN_CREATE_FLAVOR, &flavor, &flag);
    SAY("flavor shared %d", flag && *flavor == MPI_WIN_FLAVOR_SHARED);
    MPI_Win_lock_all(0, win);
    for (int i = 0; i < 4; i++)
        mine[i] = nr * 10 + i;
    MPI_Win_sync(win);
    MPI_Barrier(node);
    MPI_Win_sync(win);
    int other = (nr + 1) % ns, unit;
    MPI_Aint bytes;
    long *theirs;
    MPI_Win_shared_query(win, other, &bytes, &unit, &theirs);
    SAY("shared: neighbour's part %ld %ld, %ld bytes, unit %d", theirs[0], theirs[3], (long)bytes, unit);
    MPI_Win_unlock_all(win);
    MPI_Win_free(&win);
    MPI_Comm_free(&node);
}

static void errors(void)
{
    int *mem;
    MPI_Win win;
    MPI_Win_allocate(4 * sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &mem, &win);
    MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN);
    int v = 1;
    SAY("put outside an epoch: class %d", class_of(MPI_Put(&v, 1, MPI_INT, 0, 0, 1, MPI_INT, win)));
    SAY("unlock without a lock: class %d", class_of(MPI_Win_unlock(0, win)));
    SAY("lock of type 999: class %d", class_of(MPI_Win_lock(999, 0, 0, win)));
    int *flavor, flag;
    MPI_Win_get_attr(win, MPI_WIN_CREATE_FLAVOR, &flavor, &flag);
    SAY("flavor allocate %d", flag && *flavor == MPI_WIN_FLAVOR_ALLOCATE);
    MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win);
    SAY("put to rank 99: class %d", class_of(MPI_Put(&v, 1, MPI_INT, 99, 0, 1, MPI_INT, win)));
    SAY("get from rank -3: class %d", class_of(MPI_Get(&v, 1, MPI_INT, -3, 0, 1, MPI_INT, win)));
    SAY("flush of rank 99: class %d", class_of(MPI_Win_flush(99, win)));
    SAY("flush of rank -3: class %d", class_of(MPI_Win_flush(-3, win)));
    SAY("local flush of rank 99: class %d", class_of(MPI_Win_flush_local(99, win)));
    /* MPI compares and swaps integers, logicals and bytes: not complex numbers or long
     * doubles, which accumulate. */
    double z[2] = {1.0, 2.0}, c[2] = {0.0, 0.0}, r[2];
    SAY("compare and swap of a complex number: class %d",
        class_of(MPI_Compare_and_swap(z, c, r, MPI_C_DOUBLE_COMPLEX, 0, 0, win)));
    long double x = 1.0L, y = 0.0L, old;
    SAY("compare and swap of a long double: class %d",
        class_of(MPI_Compare_and_swap(&x, &y, &old, MPI_LONG_DOUBLE, 0, 0, win)));
    double dx = 1.0, dy = 0.0, dold;
    float fx = 1.0f, fy = 0.0f, fold;
    SAY("compare and swap of a double: class %d, of a float: class %d",
        class_of(MPI_Compare_and_swap(&dx, &dy, &dold, MPI_DOUBLE, 0, 0, win)),
        class_of(MPI_Compare_and_swap(&fx, &fy, &fold, MPI_FLOAT, 0, 0, win)));
    /* Freeing the window with the lock held: refused under the window's handler, and the
     * window is still there to unlock and free. */
    SAY("free with a lock held: class %d, window kept %d", class_of(MPI_Win_free(&win)), win != MPI_WIN_NULL);
    /* (MPICH checks neither an accumulate's operation against its type, MPI_BAND on
     * doubles, nor a window handle, 77, which mpr answers with MPI_ERR_OP and MPI_ERR_WIN:
     * not compared here.) */
    MPI_Win_unlock(0, win);
    MPI_Win_free(&win);
}

/* Request-based operations in a passive-target epoch, waited for together before the
 * unlock. */
static void request_based(void)
{
    int *base;
    MPI_Win win;
    MPI_Win_allocate(8 * sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
    MPI_Win_lock(MPI_LOCK_EXCLUSIVE, rank, 0, win);
    for (int i = 0; i < 8; i++)
        base[i] = rank * 10 + i;
    MPI_Win_unlock(rank, win);
    MPI_Barrier(MPI_COMM_WORLD);
    int next = (rank + 1) % size, v = rank + 100, got[2] = {-1, -1}, one = 1, old = -1;
    MPI_Request r[4];
    MPI_Win_lock(MPI_LOCK_EXCLUSIVE, next, 0, win);
    MPI_Rput(&v, 1, MPI_INT, next, 7, 1, MPI_INT, win, &r[0]);
    MPI_Rget(got, 2, MPI_INT, next, 0, 2, MPI_INT, win, &r[1]);
    MPI_Raccumulate(&one, 1, MPI_INT, next, 3, 1, MPI_INT, MPI_SUM, win, &r[2]);
    MPI_Rget_accumulate(&one, 1, MPI_INT, &old, 1, MPI_INT, next, 4, 1, MPI_INT, MPI_SUM, win, &r[3]);
    MPI_Waitall(4, r, MPI_STATUSES_IGNORE);
    MPI_Win_unlock(next, win);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Win_lock(MPI_LOCK_SHARED, rank, 0, win);
    SAY("request-based: got %d %d old %d, mine %d %d %d, null %d", got[0], got[1], old, base[3], base[4], base[7],
        r[0] == MPI_REQUEST_NULL);
    MPI_Win_unlock(rank, win);
    MPI_Win_free(&win);
}

/* Accumulates on the types no Rust number stands for: C's complex numbers (sums and
 * products) and long double (sums, maxima), in a fence epoch onto rank 0, with a
 * Get_accumulate and a Fetch_and_op in a passive one. Every value is exact in any order. */
static void foreign_types(void)
{
    char *mem;
    MPI_Win win;
    /* 0: a complex sum, 16: a complex product, 32: a single complex sum, 48: a long double
     * sum, 64: a long double maximum, 96: a long double complex sum (displacement unit 1). */
    MPI_Win_allocate(128, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &mem, &win);
    double one[2] = {1.0, 0.0};
    memset(mem, 0, 128);
    memcpy(mem + 16, one, sizeof one);
    MPI_Win_fence(0, win);
    double z[2] = {rank + 1.0, -0.5 * rank}, w[2] = {1.0, (double)rank};
    float f[2] = {0.25f * rank, 2.0f};
    long double l = rank + 0.5L, m = 1.25L * rank;
    MPI_Accumulate(z, 1, MPI_C_DOUBLE_COMPLEX, 0, 0, 1, MPI_C_DOUBLE_COMPLEX, MPI_SUM, win);
    MPI_Accumulate(w, 1, MPI_C_DOUBLE_COMPLEX, 0, 16, 1, MPI_C_DOUBLE_COMPLEX, MPI_PROD, win);
    MPI_Accumulate(f, 1, MPI_C_FLOAT_COMPLEX, 0, 32, 1, MPI_C_FLOAT_COMPLEX, MPI_SUM, win);
    MPI_Accumulate(&l, 1, MPI_LONG_DOUBLE, 0, 48, 1, MPI_LONG_DOUBLE, MPI_SUM, win);
    MPI_Accumulate(&m, 1, MPI_LONG_DOUBLE, 0, 64, 1, MPI_LONG_DOUBLE, MPI_MAX, win);
    long double lz[2] = {rank + 0.25L, 1.0L};
    MPI_Accumulate(lz, 1, MPI_C_LONG_DOUBLE_COMPLEX, 0, 96, 1, MPI_C_LONG_DOUBLE_COMPLEX, MPI_SUM, win);
    MPI_Win_fence(0, win);
    if (rank == 0) {
        double s[2], p[2];
        float fs[2];
        long double ls, lm;
        memcpy(s, mem, sizeof s);
        memcpy(p, mem + 16, sizeof p);
        memcpy(fs, mem + 32, sizeof fs);
        memcpy(&ls, mem + 48, sizeof ls);
        memcpy(&lm, mem + 64, sizeof lm);
        SAY("complex sum %g%+gi, product %g%+gi, float sum %g%+gi", s[0], s[1], p[0], p[1], fs[0], fs[1]);
        long double lzs[2];
        memcpy(lzs, mem + 96, sizeof lzs);
        SAY("long double sum %.3Lf, max %.3Lf, complex sum %.3Lf%+.3Lfi", ls, lm, lzs[0], lzs[1]);
    }
    MPI_Win_fence(MPI_MODE_NOSUCCEED, win);
    /* Passive: each rank in turn swaps its own complex number into rank 0's sum slot and
     * adds 1 to the long double sum; what it fetched depends on the order, so only rank
     * 0's final values are printed. */
    double old[2];
    long double add = 1.0L, before;
    MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win);
    MPI_Get_accumulate(z, 1, MPI_C_DOUBLE_COMPLEX, old, 1, MPI_C_DOUBLE_COMPLEX, 0, 0, 1, MPI_C_DOUBLE_COMPLEX,
                       MPI_REPLACE, win);
    MPI_Fetch_and_op(&add, &before, MPI_LONG_DOUBLE, 0, 48, MPI_SUM, win);
    MPI_Win_unlock(0, win);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        double s[2];
        long double ls;
        MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win);
        memcpy(s, mem, sizeof s);
        memcpy(&ls, mem + 48, sizeof ls);
        MPI_Win_unlock(0, win);
        SAY("after the swaps: a complex of real part in 1..%d: %d, long double sum %.3Lf", size,
            s[0] >= 1.0 && s[0] <= size && s[1] == -0.5 * (s[0] - 1.0), ls);
    }
    MPI_Win_free(&win);
}

/* Accumulates of the value-index pairs of MPI_MINLOC and MPI_MAXLOC, each C's struct in the
 * window: every rank's pair combined into every rank's window (ties keep the lower index;
 * a count of two; a duplicate of a pair type), then a swap and fetches that return what
 * was there. */
struct pairs {
    struct { double v; int i; } d[2];
    struct { short v; int i; } s[2];
    struct { long double v; int i; } l;
    struct { float v; int i; } f;
    struct { long v; int i; } g;
    int two[2];
};

static void pair_accumulates(void)
{
    struct pairs *p;
    MPI_Win win;
    MPI_Win_allocate(sizeof *p, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &p, &win);
    memset(p, 0, sizeof *p);
    p->d[0].v = 1e9, p->d[0].i = -1, p->d[1].v = -1e9, p->d[1].i = -1;
    p->s[0].v = 999, p->s[0].i = -1, p->s[1].v = 998, p->s[1].i = -2;
    p->l.v = -1e9L, p->l.i = -1, p->f.v = 1e9f, p->f.i = -1, p->g.v = -1, p->g.i = -1;
    p->two[0] = 1000, p->two[1] = -1;
    MPI_Datatype dup;
    MPI_Type_dup(MPI_FLOAT_INT, &dup);
    MPI_Win_fence(0, win);
    struct { double v; int i; } d = {(double)(rank % 2), rank};
    struct { short v; int i; } s[2] = {{(short)(rank % 3), rank}, {(short)(rank % 2 - 5), rank}};
    struct { long double v; int i; } l = {rank / 2 + 0.5L, rank};
    struct { float v; int i; } f = {(float)(-rank), rank};
    struct { long v; int i; } g = {1L << 40, size - 1 - rank};
    int two[2] = {rank % 2 + 7, rank};
    for (int t = 0; t < size; t++) {
        MPI_Accumulate(&d, 1, MPI_DOUBLE_INT, t, offsetof(struct pairs, d[0]), 1, MPI_DOUBLE_INT, MPI_MINLOC, win);
        MPI_Accumulate(&d, 1, MPI_DOUBLE_INT, t, offsetof(struct pairs, d[1]), 1, MPI_DOUBLE_INT, MPI_MAXLOC, win);
        MPI_Accumulate(s, 2, MPI_SHORT_INT, t, offsetof(struct pairs, s), 2, MPI_SHORT_INT, MPI_MINLOC, win);
        MPI_Accumulate(&l, 1, MPI_LONG_DOUBLE_INT, t, offsetof(struct pairs, l), 1, MPI_LONG_DOUBLE_INT, MPI_MAXLOC,
                       win);
        MPI_Accumulate(&f, 1, dup, t, offsetof(struct pairs, f), 1, dup, MPI_MINLOC, win);
        MPI_Accumulate(&g, 1, MPI_LONG_INT, t, offsetof(struct pairs, g), 1, MPI_LONG_INT, MPI_MAXLOC, win);
        MPI_Accumulate(two, 1, MPI_2INT, t, offsetof(struct pairs, two), 1, MPI_2INT, MPI_MINLOC, win);
    }
    MPI_Win_fence(0, win);
    SAY("pairs: double min %g at %d max %g at %d; short min %d at %d, %d at %d; long double max %.1Lf at %d",
        p->d[0].v, p->d[0].i, p->d[1].v, p->d[1].i, p->s[0].v, p->s[0].i, p->s[1].v, p->s[1].i, p->l.v, p->l.i);
    SAY("pairs: float min %g at %d; long max %ld at %d; 2int min %d at %d", p->f.v, p->f.i, p->g.v, p->g.i,
        p->two[0], p->two[1]);
    /* (Every rank has read its window before the next accesses.) */
    MPI_Barrier(MPI_COMM_WORLD);
    /* Each rank swaps a pair into its next one's window and fetches what was there. */
    int next = (rank + 1) % size;
    struct { double v; int i; } mine = {-2.5 * rank, 100 + rank}, old = {0, 0}, got;
    MPI_Get_accumulate(&mine, 1, MPI_DOUBLE_INT, &old, 1, MPI_DOUBLE_INT, next, offsetof(struct pairs, d[0]), 1,
                       MPI_DOUBLE_INT, MPI_REPLACE, win);
    struct { long double v; int i; } lower = {-1.0L * rank, rank}, lold;
    MPI_Fetch_and_op(&lower, &lold, MPI_LONG_DOUBLE_INT, next, offsetof(struct pairs, l), MPI_MINLOC, win);
    MPI_Fetch_and_op(NULL, &got, MPI_DOUBLE_INT, next, offsetof(struct pairs, d[1]), MPI_NO_OP, win);
    MPI_Win_fence(0, win);
    SAY("swapped out %g at %d; fetched long double %.1Lf at %d, double %g at %d; now %g at %d, long double %.1Lf at %d",
        old.v, old.i, lold.v, lold.i, got.v, got.i, p->d[0].v, p->d[0].i, p->l.v, p->l.i);
    MPI_Win_fence(MPI_MODE_NOSUCCEED, win);
    MPI_Type_free(&dup);
    MPI_Win_free(&win);
}

/* Accumulates of derived types made of value-index pairs: a vector of long double pairs and
 * one of short pairs (each pair in two runs of bytes), a named pair's contiguous elements into
 * an indexed type at the target, and a get-accumulate whose result lands in a vector. */
static void pair_layouts(void)
{
    enum { K = 12 };
    struct ldi { long double v; int i; } *l;
    struct si { short v; int i; } *sh;
    struct di { double v; int i; } *d, *dr;
    MPI_Aint bytes = K * (sizeof *l + sizeof *sh + 2 * sizeof *d);
    char *mem;
    MPI_Win win;
    MPI_Win_allocate(bytes, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &mem, &win);
    l = (struct ldi *)mem, sh = (struct si *)(l + K), d = (struct di *)(sh + K), dr = d + K;
    for (int k = 0; k < K; k++) {
        l[k].v = 0, l[k].i = -1, sh[k].v = 100, sh[k].i = -1, d[k].v = 50, d[k].i = -1;
    }
    MPI_Datatype lvec, svec, dindex, dvec;
    MPI_Type_vector(4, 2, 3, MPI_LONG_DOUBLE_INT, &lvec);
    MPI_Type_vector(3, 1, 4, MPI_SHORT_INT, &svec);
    int lens[3] = {2, 1, 3}, at[3] = {0, 4, 7};
    MPI_Type_indexed(3, lens, at, MPI_DOUBLE_INT, &dindex);
    MPI_Type_vector(3, 1, 2, MPI_DOUBLE_INT, &dvec);
    MPI_Type_commit(&lvec);
    MPI_Type_commit(&svec);
    MPI_Type_commit(&dindex);
    MPI_Type_commit(&dvec);
    struct ldi lo[K];
    struct si so[K];
    struct di dor[6];
    for (int k = 0; k < K; k++) {
        lo[k].v = (long double)((rank * 5 + k) % 7), lo[k].i = rank;
        so[k].v = (short)((rank * 3 + k) % 4), so[k].i = rank;
    }
    for (int k = 0; k < 6; k++)
        dor[k].v = (double)((rank + k) % 3), dor[k].i = rank * 10 + k;
    MPI_Win_fence(0, win);
    for (int t = 0; t < size; t++) {
        MPI_Accumulate(lo, 1, lvec, t, 0, 1, lvec, MPI_MAXLOC, win);
        MPI_Accumulate(so, 1, svec, t, (char *)sh - mem, 1, svec, MPI_MINLOC, win);
        MPI_Accumulate(dor, 6, MPI_DOUBLE_INT, t, (char *)d - mem, 1, dindex, MPI_MINLOC, win);
    }
    MPI_Win_fence(0, win);
    char line[1024];
    int n = 0;
    for (int k = 0; k < K; k++)
        n += snprintf(line + n, sizeof line - n, " %.0Lf/%d", l[k].v, l[k].i);
    SAY("pairs in a vector of long double pairs:%s", line);
    n = 0;
    for (int k = 0; k < K; k++)
        n += snprintf(line + n, sizeof line - n, " %d/%d", sh[k].v, sh[k].i);
    SAY("pairs in a vector of short pairs:%s", line);
    n = 0;
    for (int k = 0; k < K; k++)
        n += snprintf(line + n, sizeof line - n, " %g/%d", d[k].v, d[k].i);
    SAY("pairs in an indexed type of double pairs:%s", line);
    MPI_Barrier(MPI_COMM_WORLD);
    /* The next rank's first three indexed pairs, fetched into every other of six, and
     * replaced by this rank's. */
    struct di got[6];
    for (int k = 0; k < 6; k++)
        got[k].v = -7, got[k].i = -7;
    int next = (rank + 1) % size;
    MPI_Get_accumulate(dor, 3, MPI_DOUBLE_INT, got, 1, dvec, next, (char *)d - mem, 3, MPI_DOUBLE_INT, MPI_REPLACE,
                       win);
    MPI_Win_fence(0, win);
    n = 0;
    for (int k = 0; k < 6; k++)
        n += snprintf(line + n, sizeof line - n, " %g/%d", got[k].v, got[k].i);
    SAY("pairs fetched into a vector:%s; now %g/%d %g/%d %g/%d", line, d[0].v, d[0].i, d[1].v, d[1].i, d[2].v, d[2].i);
    MPI_Win_fence(MPI_MODE_NOSUCCEED, win);
    MPI_Type_free(&lvec);
    MPI_Type_free(&svec);
    MPI_Type_free(&dindex);
    MPI_Type_free(&dvec);
    (void)dr;
    MPI_Win_free(&win);
}

/* The value of every hint MPI defines for windows, as MPI_Win_get_info reports it. */
static void say_hints(const char *what, MPI_Win win)
{
    static const char *keys[] = {"no_locks",       "accumulate_ordering", "accumulate_ops",
                                 "same_size",      "same_disp_unit",      "alloc_shared_noncontig",
                                 "mpr_not_a_hint"};
    char line[1024] = "", value[64];
    MPI_Info used;
    MPI_Win_get_info(win, &used);
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        int flag;
        MPI_Info_get(used, keys[i], sizeof value - 1, value, &flag);
        size_t at = strlen(line);
        snprintf(line + at, sizeof line - at, " %s=%s", keys[i], flag ? value : "(unset)");
    }
    MPI_Info_free(&used);
    SAY("hints of %s:%s", what, line);
}

/* Window hints: MPI's defaults, those set at creation and by MPI_Win_set_info, an unknown key
 * and a value MPI does not define for its key. */
static void hints(void)
{
    MPI_Win win;
    MPI_Info in;
    int *base;
    MPI_Win_allocate(sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
    say_hints("an allocated window", win);
    MPI_Info_create(&in);
    MPI_Info_set(in, "accumulate_ordering", "rar,waw");
    MPI_Info_set(in, "same_size", "true");
    MPI_Info_set(in, "mpr_not_a_hint", "1");
    MPI_Win_set_info(win, in);
    say_hints("it, with hints set", win);
    MPI_Info_free(&in);
    MPI_Info_create(&in);
    MPI_Info_set(in, "no_locks", "false");
    MPI_Info_set(in, "accumulate_ops", "same_op");
    MPI_Info_set(in, "same_disp_unit", "maybe");
    MPI_Win_set_info(win, in);
    say_hints("it, with more", win);
    MPI_Info_free(&in);
    MPI_Win_free(&win);
    int mem[4];
    MPI_Info_create(&in);
    MPI_Info_set(in, "no_locks", "true");
    MPI_Info_set(in, "same_disp_unit", "true");
    MPI_Win_create(mem, sizeof mem, sizeof(int), in, MPI_COMM_WORLD, &win);
    MPI_Info_free(&in);
    say_hints("a window made with hints", win);
    MPI_Win_fence(0, win);
    MPI_Win_fence(0, win);
    MPI_Win_free(&win);
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    MPI_Info_create(&in);
    MPI_Info_set(in, "alloc_shared_noncontig", "true");
    MPI_Win_allocate_shared(sizeof(int), sizeof(int), in, node, &base, &win);
    MPI_Info_free(&in);
    say_hints("a shared window", win);
    MPI_Win_free(&win);
    MPI_Comm_free(&node);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    fence();
    passive();
    pscw_dynamic();
    shared();
    request_based();
    foreign_types();
    pair_accumulates();
    pair_layouts();
    hints();
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    errors();
    MPI_Barrier(MPI_COMM_WORLD);
    SAY("done");
    MPI_Finalize();
    return 0;
}
