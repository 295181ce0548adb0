/*
 * osu_mini.c - a small OSU-style MPI micro-benchmark, used as the C reference
 * side of mpr's benches/compare.sh.  Written from scratch for mpr; it mimics
 * the output format of the OSU micro-benchmarks so the same parser reads both.
 *
 * Usage:  mpiexec -n N ./osu_mini WHAT [OPTIONS]
 *   WHAT: latency | bw | bibw | mbw_mr | allreduce | bcast | allgather | alltoall | barrier
 *   --min B       smallest message size (default 0 for latency, 1 for bw, 4 otherwise)
 *   --max B, -m B largest message size (default 4194304)
 *   --iters N, -i N   timed iterations for every size (default: size dependent)
 *   --warmup N, -x N  untimed warm-up iterations for every size (default: size dependent)
 *   --window N    bw, bibw, mbw_mr: messages in flight per iteration (default 64)
 *   --pairs N     mbw_mr: sending ranks 0..N-1, each to the rank N up (default: half)
 *   --one-buffer  bw: all window slots share one buffer, as OSU's osu_bw does
 *                 (the default, as in mpr-bench)
 *   --slots       bw: each message of the window gets its own region (mpr-bench --slots)
 * --min/--max/--iters/--window are spelled as mpr-bench spells them, so one
 * BENCH_ARGS string in compare.sh can drive both (iteration defaults differ).
 *
 * Point-to-point tests (latency, bw) use ranks 0 and 1 only; other ranks idle.
 * Output: '#' header lines, then one "SIZE VALUE" row per size, "%-10d%18.2f".
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
static long g_pairs = -1; /* mbw_mr: -1 is half the ranks */
static int g_one_buffer = 1;
static long g_iters_override = -1, g_warmup_override = -1;

static void die(const char *msg)
{
    if (g_rank == 0)
        fprintf(stderr, "osu_mini: %s\n", msg);
    MPI_Abort(MPI_COMM_WORLD, 2);
    exit(2);
}

/* Page-aligned buffer, every page written (so no first-touch faults while timed). */
static void *alloc_buf(size_t bytes, int fill)
{
    void *p = NULL;
    if (bytes == 0)
        bytes = 1;
    if (posix_memalign(&p, PAGE, bytes) != 0 || p == NULL)
        die("out of memory");
    memset(p, fill, bytes);
    return p;
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
    printf("%-10ld%18.2f\n", size, value);
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
    free(sbuf);
    free(rbuf);
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
                printf("%-10ld%18.2f%18.2f\n", size, msgs * (double)size / 1e6, msgs);
                fflush(stdout);
            } else {
                print_row(size, msgs * (double)size / 1e6);
            }
        }
    }
    free(sbuf);
    free(rbuf);
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
    free(sbuf);
    free(rbuf);
}

static void usage(void)
{
    if (g_rank == 0)
        fprintf(stderr, "usage: osu_mini latency|bw|bibw|mbw_mr|allreduce|bcast|allgather|alltoall|barrier"
                        " [--min B] [--max B] [--iters N] [--warmup N] [--window N]"
                        " [--pairs N] [--one-buffer|--slots]\n");
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
        else if (has_val && !strcmp(a, "--pairs"))
            g_pairs = atol(argv[++i]);
        else if (!strcmp(a, "--one-buffer"))
            g_one_buffer = 1;
        else if (!strcmp(a, "--slots"))
            g_one_buffer = 0;
        else {
            usage();
            MPI_Finalize();
            return 2;
        }
    }
    if (g_max < 4 || g_max > (1L << 30))
        die("--max must be between 4 and 1073741824");
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
    else {
        usage();
        MPI_Finalize();
        return 2;
    }
    MPI_Finalize();
    return 0;
}
