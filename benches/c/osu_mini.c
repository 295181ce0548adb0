/*
 * osu_mini.c - a small OSU-style MPI micro-benchmark, used as the C reference
 * side of mpr's benches/compare.sh.  Written from scratch for mpr; it mimics
 * the output format of the OSU micro-benchmarks so the same parser reads both.
 *
 * Usage:  mpiexec -n N ./osu_mini WHAT [OPTIONS]
 *   WHAT: latency | bw | bibw | mbw_mr | allreduce | bcast | allgather | alltoall | barrier
 *         put_latency | get_latency | acc_latency | fop_latency | cas_latency | put_bw | get_bw
 *   --min B       smallest message size (default 0 for latency, 1 for bw, 4 otherwise)
 *   --max B, -m B largest message size (default 4194304)
 *   --iters N, -i N   timed iterations for every size (default: size dependent)
 *   --warmup N, -x N  untimed warm-up iterations for every size (default: size dependent)
 *   --window N    bw, bibw, mbw_mr: messages in flight per iteration (default 64)
 *   --offset B    every buffer starts B bytes past a page boundary (default 0; 16 is where
 *                 glibc's malloc puts a block of 128 KiB or more)
 *   --pairs N     mbw_mr: sending ranks 0..N-1, each to the rank N up (default: half)
 *   --one-buffer  bw: all window slots share one buffer, as OSU's osu_bw does
 *                 (the default, as in mpr-bench)
 *   --slots       bw: each message of the window gets its own region (mpr-bench --slots)
 *   --win allocate|create|dynamic   one-sided tests: MPI_Win_allocate (default), MPI_Win_create
 *                           or MPI_Win_create_dynamic with the memory attached
 *   --sync flush|lock|fence|pscw  one-sided tests: how operations complete (default flush:
 *                 one shared lock around the test, MPI_Win_flush after each operation, or
 *                 after each window of --window operations for put_bw/get_bw)
 * --min/--max/--iters/--window/--offset are spelled as mpr-bench spells them, so one
 * BENCH_ARGS string in compare.sh can drive both (iteration defaults differ).
 *
 * Point-to-point tests (latency, bw) use ranks 0 and 1 only; other ranks idle.
 * Output: '#' header lines, then one "SIZE VALUE" row per size, "%-10d%18.3f".
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SIZE_DEFAULT (4 * 1024 * 1024)
#define PAGE 4096
#define MAX_WINDOW 4096
#define TAG_DATA 7
#define TAG_ACK 8

static int g_rank, g_nprocs;
static long g_max = MAX_SIZE_DEFAULT;
static long g_min = -1; /* -1: per-test default */
static long g_window = 64;
static long g_offset = 0; /* --offset: bytes past a page boundary of every buffer */
static long g_pairs = -1; /* mbw_mr: -1 is half the ranks */
static int g_one_buffer = 1;
static long g_iters_override = -1, g_warmup_override = -1;
static const char *g_win = "allocate";
static const char *g_sync = "flush";

static void die(const char *msg)
{
    if (g_rank == 0)
        fprintf(stderr, "osu_mini: %s\n", msg);
    MPI_Abort(MPI_COMM_WORLD, 2);
    exit(2);
}

/* Buffer starting --offset bytes past a page boundary (0: page-aligned, as OSU's), every
 * page written (so no first-touch faults while timed); freed with free_buf. */
static void *alloc_buf(size_t bytes, int fill)
{
    void *p = NULL;
    if (bytes == 0)
        bytes = 1;
    if (posix_memalign(&p, PAGE, bytes + g_offset) != 0 || p == NULL)
        die("out of memory");
    memset(p, fill, bytes + g_offset);
    return (char *)p + g_offset;
}

static void free_buf(void *p)
{
    free((char *)p - g_offset);
}

/* Iteration counts in the spirit of OSU: many for small messages, fewer for big. */
static void pick_iters(long size, long small_it, long small_wu, long mid_it, long mid_wu,
                       long big_it, long big_wu, long *iters, long *warmup)
{
    if (size <= 8192) {
        *iters = small_it;
        *warmup = small_wu;
    } else if (size <= 65536) {
        *iters = mid_it;
        *warmup = mid_wu;
    } else {
        *iters = big_it;
        *warmup = big_wu;
    }
    if (g_iters_override > 0)
        *iters = g_iters_override;
    if (g_warmup_override >= 0)
        *warmup = g_warmup_override;
}

static void print_row(long size, double value)
{
    printf("%-10ld%18.3f\n", size, value);
    fflush(stdout);
}

static void check_byte(const char *what, long size, const char *buf, char expect)
{
    if (size > 0 && (buf[0] != expect || buf[size - 1] != expect)) {
        fprintf(stderr, "osu_mini %s: rank %d: wrong data at size %ld\n", what, g_rank, size);
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
}

static void need_two(void)
{
    if (g_nprocs < 2)
        die("this test needs at least 2 ranks");
}

static void run_latency(void)
{
    need_two();
    char *sbuf = alloc_buf(g_max, 'a');
    char *rbuf = alloc_buf(g_max, 0);
    if (g_rank == 0) {
        printf("# OSU MPI Latency Test (osu_mini)\n");
        printf("# Size          Latency (us)\n");
        fflush(stdout);
    }
    for (long size = 0; size <= g_max; size = (size ? size * 2 : 1)) {
        if (size < g_min)
            continue;
        long iters, warmup;
        pick_iters(size, 10000, 200, 1000, 20, 100, 10, &iters, &warmup);
        memset(rbuf, 0, size ? size : 1);
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = 0.0;
        if (g_rank == 0) {
            for (long i = 0; i < warmup + iters; i++) {
                if (i == warmup)
                    t0 = MPI_Wtime();
                MPI_Send(sbuf, (int)size, MPI_CHAR, 1, TAG_DATA, MPI_COMM_WORLD);
                MPI_Recv(rbuf, (int)size, MPI_CHAR, 1, TAG_DATA, MPI_COMM_WORLD,
                         MPI_STATUS_IGNORE);
            }
            double elapsed = MPI_Wtime() - t0;
            check_byte("latency", size, rbuf, 'a');
            print_row(size, elapsed * 1e6 / (2.0 * (double)iters));
        } else if (g_rank == 1) {
            for (long i = 0; i < warmup + iters; i++) {
                MPI_Recv(rbuf, (int)size, MPI_CHAR, 0, TAG_DATA, MPI_COMM_WORLD,
                         MPI_STATUS_IGNORE);
                MPI_Send(sbuf, (int)size, MPI_CHAR, 0, TAG_DATA, MPI_COMM_WORLD);
            }
            check_byte("latency", size, rbuf, 'a');
        }
    }
    free_buf(sbuf);
    free_buf(rbuf);
}

/*
 * Windowed streams, OSU's layouts.  bw: rank 0 posts g_window nonblocking sends,
 * rank 1 as many receives, both wait, then rank 1 returns a 4-byte ack.  bibw:
 * ranks 0 and 1 each post a window of receives and one of sends to the other, no
 * ack, both directions count.  mbw_mr: ranks 0..P-1 each stream to the rank P up,
 * as bw; the rate is all pairs' messages over the slowest sender's time (MB/s and
 * messages/s).  Slot w uses bytes [w*size, (w+1)*size) of the buffer, or offset 0
 * for every slot with --one-buffer.
 */
enum stream { S_BW, S_BIBW, S_MBW_MR };

static void run_streams(enum stream kind)
{
    need_two();
    long pairs = kind == S_MBW_MR ? (g_pairs > 0 ? g_pairs : g_nprocs / 2) : 1;
    if (2 * pairs > g_nprocs)
        die("mbw_mr: --pairs needs twice as many ranks");
    int bi = kind == S_BIBW;
    int to = -1, from = -1;
    if (g_rank < pairs) {
        to = g_rank + (int)pairs;
        if (bi)
            from = to;
    } else if (g_rank < 2 * pairs) {
        from = g_rank - (int)pairs;
        if (bi)
            to = from;
    }
    long slots = g_one_buffer ? 1 : g_window;
    size_t bytes = (size_t)g_max * (size_t)slots;
    /* Only a rank that uses a buffer pays for it (they can be window*max large). */
    char *sbuf = alloc_buf(to >= 0 ? bytes : 1, 'b');
    char *rbuf = alloc_buf(from >= 0 ? bytes : 1, 0);
    char ack[4] = {0, 0, 0, 0};
    static MPI_Request reqs[2 * MAX_WINDOW];
    static MPI_Status stats[2 * MAX_WINDOW]; /* real array: GCC warns on MPICH's MPI_STATUSES_IGNORE */
    if (g_rank == 0) {
        if (kind == S_BW)
            printf("# OSU MPI Bandwidth Test (osu_mini)\n# Size      Bandwidth (MB/s)\n");
        else if (kind == S_BIBW)
            printf("# OSU MPI Bi-Directional Bandwidth Test (osu_mini)\n# Size      Bandwidth (MB/s)\n");
        else
            printf("# OSU MPI Multiple Bandwidth / Message Rate Test (osu_mini, %ld pairs)\n"
                   "# Size                  MB/s        Messages/s\n",
                   pairs);
        fflush(stdout);
    }
    for (long size = 1; size <= g_max; size *= 2) {
        if (size < g_min)
            continue;
        long iters, warmup;
        size_t stride = g_one_buffer ? 0 : (size_t)size;
        pick_iters(size, 100, 10, 50, 5, 20, 2, &iters, &warmup);
        if (from >= 0)
            memset(rbuf, 0, (size_t)size * (size_t)slots);
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = 0.0;
        for (long i = 0; i < warmup + iters; i++) {
            if (i == warmup)
                t0 = MPI_Wtime();
            int n = 0;
            if (from >= 0)
                for (int w = 0; w < g_window; w++)
                    MPI_Irecv(rbuf + w * stride, (int)size, MPI_CHAR, from, TAG_DATA,
                              MPI_COMM_WORLD, &reqs[n++]);
            if (to >= 0)
                for (int w = 0; w < g_window; w++)
                    MPI_Isend(sbuf + w * stride, (int)size, MPI_CHAR, to, TAG_DATA,
                              MPI_COMM_WORLD, &reqs[n++]);
            MPI_Waitall(n, reqs, stats);
            if (!bi && to >= 0)
                MPI_Recv(ack, 4, MPI_CHAR, to, TAG_ACK, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            else if (!bi && from >= 0)
                MPI_Send(ack, 4, MPI_CHAR, from, TAG_ACK, MPI_COMM_WORLD);
        }
        double mine = to >= 0 ? MPI_Wtime() - t0 : 0.0, slowest = 0.0;
        MPI_Reduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        if (from >= 0) {
            check_byte("bw", size, rbuf, 'b');
            check_byte("bw", size, rbuf + (g_window - 1) * stride, 'b');
        }
        if (g_rank == 0) {
            double msgs = (double)(bi ? 2 : pairs) * (double)g_window * (double)iters / slowest;
            if (kind == S_MBW_MR) {
                printf("%-10ld%18.3f%18.3f\n", size, msgs * (double)size / 1e6, msgs);
                fflush(stdout);
            } else {
                print_row(size, msgs * (double)size / 1e6);
            }
        }
    }
    free_buf(sbuf);
    free_buf(rbuf);
}

enum coll { C_ALLREDUCE, C_BCAST, C_ALLGATHER, C_ALLTOALL, C_BARRIER };

static void coll_call(enum coll kind, long size, void *sbuf, void *rbuf)
{
    switch (kind) {
    case C_ALLREDUCE:
        MPI_Allreduce(sbuf, rbuf, (int)(size / (long)sizeof(float)), MPI_FLOAT, MPI_SUM,
                      MPI_COMM_WORLD);
        break;
    case C_BCAST:
        MPI_Bcast(sbuf, (int)size, MPI_CHAR, 0, MPI_COMM_WORLD);
        break;
    case C_ALLGATHER:
        MPI_Allgather(sbuf, (int)size, MPI_CHAR, rbuf, (int)size, MPI_CHAR, MPI_COMM_WORLD);
        break;
    case C_ALLTOALL:
        MPI_Alltoall(sbuf, (int)size, MPI_CHAR, rbuf, (int)size, MPI_CHAR, MPI_COMM_WORLD);
        break;
    case C_BARRIER:
        MPI_Barrier(MPI_COMM_WORLD);
        break;
    }
}

/* Time one call per iteration (barrier in between, untimed); report the average
 * over ranks of each rank's mean time per call, in microseconds. */
static double time_coll(enum coll kind, long size, void *sbuf, void *rbuf)
{
    long iters, warmup;
    if (kind == C_BARRIER)
        pick_iters(0, 1000, 100, 0, 0, 0, 0, &iters, &warmup);
    else
        pick_iters(size, 1000, 100, 200, 20, 50, 5, &iters, &warmup);
    double sum = 0.0;
    MPI_Barrier(MPI_COMM_WORLD);
    if (kind == C_BARRIER) {
        double t0 = 0.0;
        for (long i = 0; i < warmup + iters; i++) {
            if (i == warmup)
                t0 = MPI_Wtime();
            MPI_Barrier(MPI_COMM_WORLD);
        }
        sum = MPI_Wtime() - t0;
    } else {
        for (long i = 0; i < warmup + iters; i++) {
            double t0 = MPI_Wtime();
            coll_call(kind, size, sbuf, rbuf);
            double t1 = MPI_Wtime();
            if (i >= warmup)
                sum += t1 - t0;
            MPI_Barrier(MPI_COMM_WORLD);
        }
    }
    double mine = sum * 1e6 / (double)iters, total = 0.0;
    MPI_Reduce(&mine, &total, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    return total / g_nprocs;
}

static void run_coll(enum coll kind, const char *title)
{
    if (g_rank == 0) {
        printf("# OSU MPI %s Latency Test (osu_mini)\n", title);
        printf("# Size       Avg Latency(us)\n");
        fflush(stdout);
    }
    if (kind == C_BARRIER) {
        double v = time_coll(kind, 0, NULL, NULL);
        if (g_rank == 0)
            print_row(0, v);
        return;
    }
    size_t sbytes = (size_t)g_max, rbytes = (size_t)g_max;
    if (kind == C_ALLTOALL)
        sbytes = rbytes = (size_t)g_max * (size_t)g_nprocs;
    if (kind == C_ALLGATHER)
        rbytes = (size_t)g_max * (size_t)g_nprocs;
    void *sbuf = alloc_buf(sbytes, 0);
    void *rbuf = alloc_buf(rbytes, 0);
    if (kind == C_ALLREDUCE) {
        float *f = sbuf;
        for (size_t i = 0; i < sbytes / sizeof(float); i++)
            f[i] = 1.0f;
    } else {
        memset(sbuf, 'c', sbytes);
    }
    for (long size = 4; size <= g_max; size *= 2) {
        if (size < g_min)
            continue;
        double v = time_coll(kind, size, sbuf, rbuf);
        if (kind == C_ALLREDUCE) {
            const float *r = rbuf;
            long n = size / (long)sizeof(float);
            if (r[0] != (float)g_nprocs || r[n - 1] != (float)g_nprocs) {
                fprintf(stderr, "osu_mini allreduce: rank %d: wrong sum at size %ld\n", g_rank,
                        size);
                MPI_Abort(MPI_COMM_WORLD, 3);
            }
        }
        if (g_rank == 0)
            print_row(size, v);
    }
    free_buf(sbuf);
    free_buf(rbuf);
}

/*
 * One-sided tests, OSU's layout: rank 0 operates on rank 1's window; rank 1 takes
 * part only where the synchronisation needs it (fence, post/wait) and otherwise
 * waits in a barrier.  Latency: one operation and its completion per iteration;
 * put_bw/get_bw: --window operations (each get into its own slot of at most 16 MiB
 * of slots, as mpr-bench) and one completion.  acc_latency accumulates MPI_INT with
 * MPI_SUM; fop_latency and cas_latency one 8-byte MPI_INT64_T.
 */
enum rma { R_PUT, R_GET, R_ACC, R_FOP, R_CAS, R_PUT_BW, R_GET_BW };

static MPI_Group g_peer_group;

/* --sync, parsed once in run_rma (no string compare per operation: mpr-bench makes none). */
enum sync { S_FLUSH, S_LOCK, S_FENCE, S_PSCW };
static enum sync g_sync_kind = S_FLUSH;

static void rma_open(MPI_Win win)
{
    if (g_sync_kind == S_FLUSH && g_rank == 0)
        MPI_Win_lock(MPI_LOCK_SHARED, 1, 0, win);
}

static void rma_close(MPI_Win win)
{
    if (g_sync_kind == S_FLUSH && g_rank == 0)
        MPI_Win_unlock(1, win);
}

static void rma_begin(MPI_Win win)
{
    if (g_sync_kind == S_LOCK && g_rank == 0)
        MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 1, 0, win);
    else if (g_sync_kind == S_FENCE && g_rank < 2)
        MPI_Win_fence(0, win);
    else if (g_sync_kind == S_PSCW && g_rank == 0)
        MPI_Win_start(g_peer_group, 0, win);
    else if (g_sync_kind == S_PSCW && g_rank == 1)
        MPI_Win_post(g_peer_group, 0, win);
}

static void rma_end(MPI_Win win)
{
    if (g_sync_kind == S_FLUSH && g_rank == 0)
        MPI_Win_flush(1, win);
    else if (g_sync_kind == S_LOCK && g_rank == 0)
        MPI_Win_unlock(1, win);
    else if (g_sync_kind == S_FENCE && g_rank < 2)
        MPI_Win_fence(0, win);
    else if (g_sync_kind == S_PSCW && g_rank == 0)
        MPI_Win_complete(win);
    else if (g_sync_kind == S_PSCW && g_rank == 1)
        MPI_Win_wait(win);
}

static void run_rma(enum rma kind, const char *title)
{
    need_two();
    if (!strcmp(g_sync, "flush"))
        g_sync_kind = S_FLUSH;
    else if (!strcmp(g_sync, "lock"))
        g_sync_kind = S_LOCK;
    else if (!strcmp(g_sync, "fence"))
        g_sync_kind = S_FENCE;
    else if (!strcmp(g_sync, "pscw"))
        g_sync_kind = S_PSCW;
    else
        die("--sync takes flush, lock, fence or pscw");
    if (strcmp(g_win, "allocate") && strcmp(g_win, "create") && strcmp(g_win, "dynamic"))
        die("--win takes allocate, create or dynamic");
    int bw = kind == R_PUT_BW || kind == R_GET_BW;
    long elem = kind == R_ACC ? 4 : (kind == R_FOP || kind == R_CAS) ? 8 : 1;
    long win_bytes = (kind == R_FOP || kind == R_CAS) ? 8 : g_max;
    MPI_Group world;
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    int peer = g_rank == 0 ? 1 : 0;
    MPI_Group_incl(world, 1, &peer, &g_peer_group);
    void *base = NULL;
    MPI_Win win;
    /* Where rank 1's memory starts, as a target displacement: 0, or its address in a
       dynamic window (whose displacement unit is the byte). */
    MPI_Aint tdisp = 0;
    if (!strcmp(g_win, "allocate")) {
        MPI_Win_allocate(win_bytes, (int)elem, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
        memset(base, 0, win_bytes);
    } else if (!strcmp(g_win, "create")) {
        base = alloc_buf(win_bytes, 0);
        MPI_Win_create(base, win_bytes, (int)elem, MPI_INFO_NULL, MPI_COMM_WORLD, &win);
    } else {
        base = alloc_buf(win_bytes, 0);
        MPI_Win_create_dynamic(MPI_INFO_NULL, MPI_COMM_WORLD, &win);
        MPI_Win_attach(win, base, win_bytes);
        MPI_Get_address(base, &tdisp);
        MPI_Bcast(&tdisp, 1, MPI_AINT, 1, MPI_COMM_WORLD);
    }
    char *src = alloc_buf(g_max, 'a');
    long slots_bytes = 16L << 20;
    char *dst = alloc_buf(bw ? slots_bytes : g_max, 0);
    if (g_rank == 0) {
        printf("# OSU MPI %s Test (osu_mini)\n", title);
        printf("# Window creation: %s\n# Synchronization: %s\n", g_win, g_sync);
        printf(bw ? "# Size      Bandwidth (MB/s)\n" : "# Size          Latency (us)\n");
        fflush(stdout);
    }
    long first = kind == R_FOP || kind == R_CAS ? 8 : (g_min > elem ? g_min : elem);
    long last = kind == R_FOP || kind == R_CAS ? 8 : g_max;
    for (long size = first; size <= last; size *= 2) {
        long iters, warmup;
        if (bw)
            pick_iters(size, 100, 10, 50, 5, 20, 2, &iters, &warmup);
        else
            pick_iters(size, 10000, 200, 1000, 20, 100, 10, &iters, &warmup);
        long n = bw ? g_window : 1;
        long batch = slots_bytes / size < 1 ? 1 : slots_bytes / size;
        if (batch > n)
            batch = n;
        MPI_Barrier(MPI_COMM_WORLD);
        rma_open(win);
        double t0 = 0.0;
        for (long i = 0; i < warmup + iters; i++) {
            if (i == warmup)
                t0 = MPI_Wtime();
            rma_begin(win);
            if (g_rank == 0) {
                int count = (int)(size / elem);
                for (long k = 0; k < n; k++) {
                    switch (kind) {
                    case R_PUT:
                    case R_PUT_BW:
                        MPI_Put(src, count, MPI_CHAR, 1, tdisp, count, MPI_CHAR, win);
                        break;
                    case R_GET:
                        MPI_Get(dst, count, MPI_CHAR, 1, tdisp, count, MPI_CHAR, win);
                        break;
                    case R_GET_BW:
                        MPI_Get(dst + (k % batch) * size, count, MPI_CHAR, 1, tdisp, count, MPI_CHAR, win);
                        if ((k + 1) % batch == 0 && k + 1 < n && g_sync_kind != S_FENCE &&
                            g_sync_kind != S_PSCW)
                            MPI_Win_flush_local(1, win);
                        break;
                    case R_ACC:
                        MPI_Accumulate(src, count, MPI_INT, 1, tdisp, count, MPI_INT, MPI_SUM, win);
                        break;
                    case R_FOP:
                        MPI_Fetch_and_op(src, dst, MPI_INT64_T, 1, tdisp, MPI_SUM, win);
                        break;
                    case R_CAS:
                        MPI_Compare_and_swap(src, dst + 8, dst, MPI_INT64_T, 1, tdisp, win);
                        break;
                    }
                }
            }
            rma_end(win);
        }
        double elapsed = MPI_Wtime() - t0;
        rma_close(win);
        MPI_Barrier(MPI_COMM_WORLD);
        if (g_rank == 0) {
            if (bw)
                print_row(size, (double)size * (double)n * (double)iters / elapsed / 1e6);
            else
                print_row(size, elapsed * 1e6 / (double)iters);
        }
    }
    if (!strcmp(g_win, "dynamic"))
        MPI_Win_detach(win, base);
    MPI_Win_free(&win);
    if (strcmp(g_win, "allocate"))
        free_buf(base);
    free_buf(src);
    free_buf(dst);
    MPI_Group_free(&g_peer_group);
    MPI_Group_free(&world);
}

static void usage(void)
{
    if (g_rank == 0)
        fprintf(stderr, "usage: osu_mini latency|bw|bibw|mbw_mr|allreduce|bcast|allgather|alltoall|barrier"
                        " [--min B] [--max B] [--iters N] [--warmup N] [--window N] [--offset B]"
                        " [--pairs N] [--one-buffer|--slots]\n"
                        "       osu_mini put_latency|get_latency|acc_latency|fop_latency|cas_latency|put_bw|get_bw"
                        " [--win allocate|create|dynamic] [--sync flush|lock|fence|pscw] [size and iteration options]\n");
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_nprocs);
    if (argc < 2) {
        usage();
        MPI_Finalize();
        return 2;
    }
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        int has_val = i + 1 < argc;
        if (has_val && (!strcmp(a, "-m") || !strcmp(a, "--max")))
            g_max = atol(argv[++i]);
        else if (has_val && !strcmp(a, "--min"))
            g_min = atol(argv[++i]);
        else if (has_val && (!strcmp(a, "-i") || !strcmp(a, "--iters")))
            g_iters_override = atol(argv[++i]);
        else if (has_val && (!strcmp(a, "-x") || !strcmp(a, "--warmup")))
            g_warmup_override = atol(argv[++i]);
        else if (has_val && !strcmp(a, "--window"))
            g_window = atol(argv[++i]);
        else if (has_val && !strcmp(a, "--offset"))
            g_offset = atol(argv[++i]);
        else if (has_val && !strcmp(a, "--pairs"))
            g_pairs = atol(argv[++i]);
        else if (!strcmp(a, "--one-buffer"))
            g_one_buffer = 1;
        else if (!strcmp(a, "--slots"))
            g_one_buffer = 0;
        else if (has_val && !strcmp(a, "--win"))
            g_win = argv[++i];
        else if (has_val && !strcmp(a, "--sync"))
            g_sync = argv[++i];
        else {
            usage();
            MPI_Finalize();
            return 2;
        }
    }
    if (g_max < 4 || g_max > (1L << 30))
        die("--max must be between 4 and 1073741824");
    if (g_offset < 0 || g_offset >= PAGE || g_offset % 8 != 0)
        die("--offset must be a multiple of 8 below 4096");
    if (g_window < 1 || g_window > MAX_WINDOW)
        die("--window must be between 1 and 4096");
    if ((size_t)g_max * (size_t)g_window > ((size_t)1 << 31) && !g_one_buffer &&
        (!strcmp(argv[1], "bw") || !strcmp(argv[1], "bibw") || !strcmp(argv[1], "mbw_mr")))
        die("--max times --window must stay below 2 GiB (or use --one-buffer)");

    const char *what = argv[1];
    if (strcmp(what, "latency") == 0)
        run_latency();
    else if (strcmp(what, "bw") == 0)
        run_streams(S_BW);
    else if (strcmp(what, "bibw") == 0)
        run_streams(S_BIBW);
    else if (strcmp(what, "mbw_mr") == 0)
        run_streams(S_MBW_MR);
    else if (strcmp(what, "allreduce") == 0)
        run_coll(C_ALLREDUCE, "Allreduce");
    else if (strcmp(what, "bcast") == 0)
        run_coll(C_BCAST, "Broadcast");
    else if (strcmp(what, "allgather") == 0)
        run_coll(C_ALLGATHER, "Allgather");
    else if (strcmp(what, "alltoall") == 0)
        run_coll(C_ALLTOALL, "All-to-All");
    else if (strcmp(what, "barrier") == 0)
        run_coll(C_BARRIER, "Barrier");
    else if (strcmp(what, "put_latency") == 0)
        run_rma(R_PUT, "Put Latency");
    else if (strcmp(what, "get_latency") == 0)
        run_rma(R_GET, "Get Latency");
    else if (strcmp(what, "acc_latency") == 0)
        run_rma(R_ACC, "Accumulate Latency");
    else if (strcmp(what, "fop_latency") == 0)
        run_rma(R_FOP, "Fetch_and_op Latency");
    else if (strcmp(what, "cas_latency") == 0)
        run_rma(R_CAS, "Compare_and_swap Latency");
    else if (strcmp(what, "put_bw") == 0)
        run_rma(R_PUT_BW, "Put Bandwidth");
    else if (strcmp(what, "get_bw") == 0)
        run_rma(R_GET_BW, "Get Bandwidth");
    else {
        usage();
        MPI_Finalize();
        return 2;
    }
    MPI_Finalize();
    return 0;
}
