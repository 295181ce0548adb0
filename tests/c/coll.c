/* The C ABI's data-moving collectives (with their v-forms and MPI_IN_PLACE), scans,
 * reduce-scatter, local reductions, communicator splits, groups and communicators made from
 * them, nonblocking duplicates (MPI_Comm_idup), comparisons, names and attributes, printed
 * as "rank: what = values" lines; the test compares them with MPICH's. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static int rank, size;

/* One line per call, written at once (launchers may forward output as it is written). */
static void say(const char *what, const int *v, int n)
{
    char line[1024];
    int len = snprintf(line, sizeof line, "%d: %s =", rank, what);
    for (int i = 0; i < n && len < (int)sizeof line - 16; i++)
        len += snprintf(line + len, sizeof line - len, " %d", v[i]);
    line[len++] = '\n';
    fwrite(line, 1, (size_t)len, stdout);
    fflush(stdout);
}

/* Nonblocking collectives, several in flight at once and beside point-to-point requests,
 * waited for together. */
static void nonblocking(void)
{
    int p = size, next = (rank + 1) % p, prev = (rank + p - 1) % p;
    MPI_Request r[12];
    int bc[4] = {0}, ar[2] = {rank + 1, -rank}, arsum[2], inplace[2] = {rank, 2 * rank}, red[2] = {0, 0};
    double dmax = rank * 1.5, dres = 0;
    int ag[16], ip[16], a2a_s[16], a2a_r[16], gat[16], sc_s[16], sc_r[2], token = rank * 9, got = -1;
    if (rank == 1 % p)
        for (int i = 0; i < 4; i++)
            bc[i] = 40 + i;
    for (int i = 0; i < p; i++) {
        ip[i] = i == rank ? rank * 5 : -7;
        a2a_s[i] = rank * 100 + i;
    }
    for (int i = 0; i < 2 * p; i++)
        sc_s[i] = 700 + i;
    int n = 0;
    MPI_Ibcast(bc, 4, MPI_INT, 1 % p, MPI_COMM_WORLD, &r[n++]);
    MPI_Iallreduce(ar, arsum, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &r[n++]);
    MPI_Iallreduce(MPI_IN_PLACE, inplace, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD, &r[n++]);
    MPI_Ireduce(&dmax, &dres, 1, MPI_DOUBLE, MPI_MAX, 2 % p, MPI_COMM_WORLD, &r[n++]);
    MPI_Iallgather(&token, 1, MPI_INT, ag, 1, MPI_INT, MPI_COMM_WORLD, &r[n++]);
    MPI_Iallgather(MPI_IN_PLACE, 1, MPI_INT, ip, 1, MPI_INT, MPI_COMM_WORLD, &r[n++]);
    MPI_Ialltoall(a2a_s, 1, MPI_INT, a2a_r, 1, MPI_INT, MPI_COMM_WORLD, &r[n++]);
    MPI_Igather(ar, 2, MPI_INT, gat, 2, MPI_INT, 0, MPI_COMM_WORLD, &r[n++]);
    MPI_Iscatter(sc_s, 2, MPI_INT, sc_r, 2, MPI_INT, p - 1, MPI_COMM_WORLD, &r[n++]);
    MPI_Irecv(&got, 1, MPI_INT, prev, 77, MPI_COMM_WORLD, &r[n++]);
    MPI_Isend(&token, 1, MPI_INT, next, 77, MPI_COMM_WORLD, &r[n++]);
    MPI_Ireduce(ar, red, 2, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD, &r[n++]);
    MPI_Waitall(n, r, MPI_STATUSES_IGNORE);
    say("ibcast", bc, 4);
    say("iallreduce", arsum, 2);
    say("iallreduce in place", inplace, 2);
    if (rank == 2 % p) {
        int d = (int)(dres * 10);
        say("ireduce max", &d, 1);
    }
    if (rank == 0) {
        say("ireduce sum", red, 2);
        say("igather", gat, 2 * p);
    }
    say("iallgather", ag, p);
    say("iallgather in place", ip, p);
    say("ialltoall", a2a_r, p);
    say("iscatter", sc_r, 2);
    say("p2p beside them", &got, 1);
    /* A barrier tested until done; a broadcast waited for alone. */
    int flag = 0;
    MPI_Request b;
    MPI_Ibarrier(MPI_COMM_WORLD, &b);
    while (!flag)
        MPI_Test(&b, &flag, MPI_STATUS_IGNORE);
    int v = rank == 0 ? 31 : 0;
    MPI_Ibcast(&v, 1, MPI_INT, 0, MPI_COMM_WORLD, &b);
    MPI_Wait(&b, MPI_STATUS_IGNORE);
    say("ibarrier then ibcast", &v, 1);
}

/* The nonblocking v-forms, reduce-scatters and scans, all in flight at once. */
static void nonblocking_v(void)
{
    int p = size, counts[8], displs[8], rc[8], rd[8], sd[8];
    int send[16], gv[32], sv[4], agv[32], a2s[16], a2r[32], rsb[2], rs[4], sc[2], ex[2] = {-9, -9};
    int total = 0;
    for (int i = 0; i < p; i++) {
        counts[i] = i % 2 + 1;
        displs[i] = total + i;
        total += counts[i] + 1;
    }
    for (int i = 0; i < 16; i++)
        send[i] = rank * 100 + i;
    for (int i = 0; i < 32; i++)
        gv[i] = agv[i] = a2r[i] = -1;
    for (int i = 0; i < p; i++) {
        a2s[i] = rank * 10 + i;
        rc[i] = 1;
        sd[i] = i;
        rd[i] = 2 * (p - 1 - i);
    }
    int rsc[8], inp[16];
    for (int i = 0; i < p; i++)
        rsc[i] = i % 3; /* rank 0 (and every third) gets none */
    for (int i = 0; i < 2 * p; i++)
        inp[i] = rank + i;
    MPI_Request r[8];
    int n = 0;
    MPI_Igatherv(send, counts[rank], MPI_INT, gv, counts, displs, MPI_INT, 0, MPI_COMM_WORLD, &r[n++]);
    MPI_Iscatterv(send, counts, displs, MPI_INT, sv, counts[rank], MPI_INT, p - 1, MPI_COMM_WORLD, &r[n++]);
    MPI_Iallgatherv(send, counts[rank], MPI_INT, agv, counts, displs, MPI_INT, MPI_COMM_WORLD, &r[n++]);
    MPI_Ialltoallv(a2s, rc, sd, MPI_INT, a2r, rc, rd, MPI_INT, MPI_COMM_WORLD, &r[n++]);
    MPI_Ireduce_scatter_block(inp, rsb, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &r[n++]);
    MPI_Ireduce_scatter(inp, rs, rsc, MPI_INT, MPI_MAX, MPI_COMM_WORLD, &r[n++]);
    int mine[2] = {rank + 1, 2 * rank - 3};
    MPI_Iscan(mine, sc, 2, MPI_INT, MPI_PROD, MPI_COMM_WORLD, &r[n++]);
    MPI_Iexscan(mine, ex, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &r[n++]);
    MPI_Waitall(n, r, MPI_STATUSES_IGNORE);
    if (rank == 0)
        say("igatherv", gv, total);
    say("iscatterv", sv, counts[rank]);
    say("iallgatherv", agv, total);
    say("ialltoallv", a2r, 2 * p);
    say("ireduce_scatter_block", rsb, 2);
    say("ireduce_scatter", rs, rsc[rank]);
    say("iscan", sc, 2);
    if (rank > 0)
        say("iexscan", ex, 2);
}

/* Attributes of the program's: copy functions on MPI_Comm_dup, delete functions on a
 * replaced value, MPI_Comm_delete_attr, MPI_Comm_free, and at MPI_Finalize for
 * MPI_COMM_SELF; the predefined MPI_COMM_DUP_FN and null functions; bad keys. */
static int copies, deletes;

static int copy_fn(MPI_Comm c, int k, void *extra, void *in, void *out, int *flag)
{
    (void)c;
    (void)k;
    copies += *(int *)extra;
    *(void **)out = (char *)in + 1;
    *flag = 1;
    return MPI_SUCCESS;
}

static int delete_fn(MPI_Comm c, int k, void *val, void *extra)
{
    (void)c;
    (void)k;
    (void)val;
    deletes += *(int *)extra;
    return MPI_SUCCESS;
}

static int at_finalize(MPI_Comm c, int k, void *val, void *extra)
{
    (void)c;
    (void)k;
    (void)extra;
    int v[2] = {(int)(intptr_t)val, copies * 100 + deletes};
    say("finalize hook", v, 2);
    return MPI_SUCCESS;
}

static void attributes(void)
{
    static int one = 1;
    int k1, k2, k3, k4, flag;
    MPI_Comm_create_keyval(copy_fn, delete_fn, &k1, &one);
    MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, delete_fn, &k2, &one);
    MPI_Comm_create_keyval(MPI_COMM_DUP_FN, MPI_COMM_NULL_DELETE_FN, &k3, NULL);
    MPI_Comm c, d;
    MPI_Comm_dup(MPI_COMM_WORLD, &c);
    MPI_Comm_set_attr(c, k1, (void *)(intptr_t)100);
    MPI_Comm_set_attr(c, k2, (void *)(intptr_t)200);
    MPI_Comm_set_attr(c, k3, (void *)(intptr_t)300);
    MPI_Comm_set_attr(c, k1, (void *)(intptr_t)101);
    MPI_Comm_dup(c, &d);
    void *v1, *v2, *v3;
    int f[3], got[6];
    MPI_Comm_get_attr(d, k1, &v1, &f[0]);
    MPI_Comm_get_attr(d, k2, &v2, &f[1]);
    MPI_Comm_get_attr(d, k3, &v3, &f[2]);
    got[0] = f[0];
    got[1] = f[0] ? (int)(intptr_t)v1 : 0;
    got[2] = f[1];
    got[3] = f[2];
    got[4] = f[2] ? (int)(intptr_t)v3 : 0;
    got[5] = copies * 100 + deletes;
    say("attributes of a duplicate", got, 6);
    MPI_Comm_delete_attr(c, k2);
    MPI_Comm_get_attr(c, k2, &v2, &flag);
    int after[2] = {flag, deletes};
    say("deleted", after, 2);
    MPI_Comm_free(&c);
    MPI_Comm_free(&d);
    MPI_Comm_free_keyval(&k1);
    int counts[3] = {copies, deletes, k1 == MPI_KEYVAL_INVALID};
    say("copies deletes invalid", counts, 3);
    int *usz;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_UNIVERSE_SIZE, &usz, &flag);
    int u = flag ? *usz >= size : 1;
    say("universe size", &u, 1);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int cls, rc = MPI_Comm_set_attr(MPI_COMM_WORLD, 54321, NULL);
    MPI_Error_class(rc, &cls);
    int e[2] = {cls, 0};
    rc = MPI_Comm_get_attr(MPI_COMM_WORLD, 12345, &v1, &flag);
    MPI_Error_class(rc, &cls);
    e[1] = cls;
    say("bad keys", e, 2);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, at_finalize, &k4, NULL);
    MPI_Comm_set_attr(MPI_COMM_SELF, k4, (void *)(intptr_t)(7 + rank));
    MPI_Comm_free_keyval(&k2);
    MPI_Comm_free_keyval(&k3);
}

/* MPI_Comm_idup: three duplicates in flight beside an MPI_Ibarrier and a blocking
 * MPI_Comm_split; each has a context of its own (messages on one are not received on
 * another), works for collectives, and has its parent's attributes. */
static void idups(void)
{
    int key;
    MPI_Comm_create_keyval(MPI_COMM_DUP_FN, MPI_COMM_NULL_DELETE_FN, &key, NULL);
    MPI_Comm parent, d[3], half;
    MPI_Comm_dup(MPI_COMM_WORLD, &parent);
    MPI_Comm_set_attr(parent, key, (void *)(intptr_t)(40 + rank));
    MPI_Request r[4];
    for (int i = 0; i < 3; i++)
        MPI_Comm_idup(parent, &d[i], &r[i]);
    MPI_Ibarrier(parent, &r[3]);
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half);
    MPI_Waitall(4, r, MPI_STATUSES_IGNORE);
    int next = (rank + 1) % size, prev = (rank + size - 1) % size, got[3], mine[3];
    for (int i = 0; i < 3; i++) {
        mine[i] = 100 * i + rank;
        MPI_Isend(&mine[i], 1, MPI_INT, next, 0, d[i], &r[i]);
    }
    for (int i = 2; i >= 0; i--)
        MPI_Recv(&got[i], 1, MPI_INT, prev, 0, d[i], MPI_STATUS_IGNORE);
    MPI_Waitall(3, r, MPI_STATUSES_IGNORE);
    say("idup messages from the previous rank", got, 3);
    int sums[3], flags[3], vals[3], cmp[3];
    for (int i = 0; i < 3; i++) {
        void *v;
        MPI_Allreduce(&mine[i], &sums[i], 1, MPI_INT, MPI_SUM, d[i]);
        MPI_Comm_get_attr(d[i], key, &v, &flags[i]);
        vals[i] = flags[i] ? (int)(intptr_t)v : -1;
        MPI_Comm_compare(d[i], parent, &cmp[i]);
    }
    say("idup all-reduces", sums, 3);
    say("idup attributes", vals, 3);
    say("idup compared with the parent", cmp, 3);
    int hs;
    MPI_Allreduce(&rank, &hs, 1, MPI_INT, MPI_SUM, half);
    say("split beside them, all-reduce", &hs, 1);
    for (int i = 0; i < 3; i++)
        MPI_Comm_free(&d[i]);
    MPI_Comm_free(&half);
    MPI_Comm_free(&parent);
    MPI_Comm_free_keyval(&key);
}

static int class_of(int code)
{
    int c;
    MPI_Error_class(code, &c);
    return c;
}

/* A collective's input lying in its output (short of MPI_IN_PLACE) is refused with
 * MPI_ERR_BUFFER before any message goes, so a rank that alone makes the mistake gets its
 * error: the rooted ones are called by the root alone. MPI_IN_PLACE where a buffer of data
 * is due is refused too. Then the communicator still works. */
static void aliases(void)
{
    int buf[64], other[64], counts[8], displs[8], c[24], n = 0;
    MPI_Request req;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    for (int i = 0; i < 64; i++)
        buf[i] = i;
    for (int i = 0; i < size; i++)
        counts[i] = 1, displs[i] = 2 * i;
    if (rank == 0) {
        c[n++] = class_of(MPI_Gather(buf, 2, MPI_INT, buf, 2, MPI_INT, 0, MPI_COMM_WORLD));
        c[n++] = class_of(MPI_Scatter(buf, 2, MPI_INT, buf, 2, MPI_INT, 0, MPI_COMM_WORLD));
        c[n++] = class_of(MPI_Gatherv(buf, 1, MPI_INT, buf, counts, displs, MPI_INT, 0, MPI_COMM_WORLD));
        c[n++] = class_of(MPI_Scatterv(buf, counts, displs, MPI_INT, buf, 1, MPI_INT, 0, MPI_COMM_WORLD));
        c[n++] = class_of(MPI_Reduce(buf, buf, 2, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD));
        c[n++] = class_of(MPI_Igather(buf, 2, MPI_INT, buf, 2, MPI_INT, 0, MPI_COMM_WORLD, &req));
        c[n++] = class_of(MPI_Iscatter(buf, 2, MPI_INT, buf, 2, MPI_INT, 0, MPI_COMM_WORLD, &req));
        c[n++] = class_of(MPI_Ireduce(buf, buf, 2, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD, &req));
    }
    /* Every rank: its block of the output, or the output itself. */
    c[n++] = class_of(MPI_Allgather(&buf[rank], 1, MPI_INT, buf, 1, MPI_INT, MPI_COMM_WORLD));
    c[n++] = class_of(MPI_Allgatherv(&buf[2 * rank], 1, MPI_INT, buf, counts, displs, MPI_INT, MPI_COMM_WORLD));
    c[n++] = class_of(MPI_Alltoall(buf, 1, MPI_INT, buf, 1, MPI_INT, MPI_COMM_WORLD));
    c[n++] = class_of(MPI_Alltoallv(buf, counts, displs, MPI_INT, buf, counts, displs, MPI_INT, MPI_COMM_WORLD));
    c[n++] = class_of(MPI_Allreduce(buf, buf, 3, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    c[n++] = class_of(MPI_Reduce_scatter_block(buf, buf, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    c[n++] = class_of(MPI_Scan(buf, buf, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    c[n++] = class_of(MPI_Iallgather(&buf[rank], 1, MPI_INT, buf, 1, MPI_INT, MPI_COMM_WORLD, &req));
    c[n++] = class_of(MPI_Ialltoall(buf, 1, MPI_INT, buf, 1, MPI_INT, MPI_COMM_WORLD, &req));
    c[n++] = class_of(MPI_Iallreduce(buf, buf, 3, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &req));
    c[n++] = class_of(MPI_Iexscan(buf, buf, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &req));
    c[n++] = class_of(MPI_Reduce_local(buf, buf, 2, MPI_INT, MPI_SUM));
    c[n++] = class_of(MPI_Reduce_local(buf, MPI_IN_PLACE, 2, MPI_INT, MPI_SUM));
    c[n++] = class_of(MPI_Reduce_local(MPI_IN_PLACE, buf, 2, MPI_INT, MPI_SUM));
    say("input in the output: error classes", c, n);
    /* Untouched, and the communicator in step: a sum and a gather after the refusals. */
    int same = 1;
    for (int i = 0; i < 64; i++)
        same &= buf[i] == i;
    int sum = -1;
    MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Gather(&rank, 1, MPI_INT, other, 1, MPI_INT, 0, MPI_COMM_WORLD);
    int after[3] = {same, sum, rank == 0 ? other[size - 1] : size - 1};
    say("after them: buffer untouched, sum, last gathered", after, 3);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
}

/* Broadcasts whose counts differ between the root and the others (an erroneous program that
 * MPI lets an implementation report): each other rank gets an error, blocking and nonblocking,
 * over every path (a few ints to a few hundred thousand, the root's count the larger or the
 * smaller), and the communicator stays in step: a broadcast and a sum after each are right.
 * The class of a blocking one is printed for ranks 1 and 2 only, whose count meets the root's
 * own (truncate when the root sends more, other when less); a rank the root's bytes reach
 * through another rank gets the class of what that rank passes on, which the implementations
 * choose, and so do they for the nonblocking one (MPICH: other; mpr: as the blocking one). */
static void lengths(void)
{
    static int buf[100000];
    const int pairs[][2] = {{1, 10},   {10, 1},     {100, 1000}, {1000, 100},    {10, 1000},     {1000, 10},
                            {300, 3000}, {3000, 300}, {100000, 30000}, {30000, 100000}};
    const int np = (int)(sizeof pairs / sizeof pairs[0]);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    for (int i = 0; i < 2 * np; i++) {
        int nb = i >= np, n = rank == 0 ? pairs[i % np][0] : pairs[i % np][1];
        for (int j = 0; j < n; j++)
            buf[j] = rank == 0 ? j : -1;
        int e;
        if (nb) {
            MPI_Request r;
            e = MPI_Ibcast(buf, n, MPI_INT, 0, MPI_COMM_WORLD, &r);
            if (e == MPI_SUCCESS)
                e = MPI_Wait(&r, MPI_STATUS_IGNORE);
        } else {
            e = MPI_Bcast(buf, n, MPI_INT, 0, MPI_COMM_WORLD);
        }
        int v[3] = {e != MPI_SUCCESS, !nb && (rank == 1 || rank == 2) ? class_of(e) : -1, 0};
        /* In step: a broadcast of 7 ints and a sum. */
        for (int j = 0; j < 7; j++)
            buf[j] = rank == 0 ? 3 * j + i : 0;
        int ok = MPI_Bcast(buf, 7, MPI_INT, 0, MPI_COMM_WORLD) == MPI_SUCCESS, sum = 0;
        for (int j = 0; j < 7; j++)
            ok &= buf[j] == 3 * j + i;
        ok &= MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD) == MPI_SUCCESS;
        v[2] = ok && sum == size * (size - 1) / 2;
        char what[96];
        snprintf(what, sizeof what, "%s of %d ints from 0 (%d here): error, class, in step after",
                 nb ? "ibcast" : "bcast", pairs[i % np][0], n);
        say(what, v, 3);
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int p = size, buf[64], out[64], counts[8], displs[8], rcounts[8], rdispls[8];

    /* Gather and scatter, fixed and in place. */
    int two[2] = {rank * 10 + 1, rank * 10 + 2};
    memset(out, 0, sizeof out);
    MPI_Gather(two, 2, MPI_INT, out, 2, MPI_INT, 1, MPI_COMM_WORLD);
    if (rank == 1)
        say("gather", out, 2 * p);
    for (int i = 0; i < 2 * p; i++)
        buf[i] = rank == 0 ? 100 + i : -1;
    if (rank == 0)
        MPI_Gather(MPI_IN_PLACE, 2, MPI_INT, buf, 2, MPI_INT, 0, MPI_COMM_WORLD);
    else
        MPI_Gather(two, 2, MPI_INT, NULL, 0, MPI_INT, 0, MPI_COMM_WORLD);
    if (rank == 0)
        say("gather in place", buf, 2 * p);
    for (int i = 0; i < 3 * p; i++)
        buf[i] = 1000 + i;
    MPI_Scatter(buf, 3, MPI_INT, out, 3, MPI_INT, 2 % p, MPI_COMM_WORLD);
    say("scatter", out, 3);
    /* Allgather and alltoall. */
    short s = (short)(rank * 7), ss[8];
    MPI_Allgather(&s, 1, MPI_SHORT, ss, 1, MPI_SHORT, MPI_COMM_WORLD);
    for (int i = 0; i < p; i++)
        out[i] = ss[i];
    say("allgather", out, p);
    for (int i = 0; i < p; i++)
        buf[i] = i == rank ? rank * 3 : -9;
    MPI_Allgather(MPI_IN_PLACE, 1, MPI_INT, buf, 1, MPI_INT, MPI_COMM_WORLD);
    say("allgather in place", buf, p);
    for (int i = 0; i < 2 * p; i++)
        buf[i] = rank * 100 + i;
    MPI_Alltoall(buf, 2, MPI_INT, out, 2, MPI_INT, MPI_COMM_WORLD);
    say("alltoall", out, 2 * p);
    MPI_Alltoall(MPI_IN_PLACE, 2, MPI_INT, buf, 2, MPI_INT, MPI_COMM_WORLD);
    say("alltoall in place", buf, 2 * p);
    /* The v-forms: rank i gives i + 1 elements, placed with gaps. */
    int mine[8];
    for (int i = 0; i <= rank; i++)
        mine[i] = rank * 10 + i;
    for (int i = 0, at = 0; i < p; i++) {
        counts[i] = i + 1;
        displs[i] = at + 1;
        at += i + 3;
    }
    memset(out, -1, sizeof out);
    MPI_Gatherv(mine, rank + 1, MPI_INT, out, counts, displs, MPI_INT, 0, MPI_COMM_WORLD);
    if (rank == 0)
        say("gatherv", out, displs[p - 1] + counts[p - 1]);
    memset(out, -1, sizeof out);
    MPI_Allgatherv(mine, rank + 1, MPI_INT, out, counts, displs, MPI_INT, MPI_COMM_WORLD);
    say("allgatherv", out, displs[p - 1] + counts[p - 1]);
    for (int i = 0; i < 32; i++)
        buf[i] = 500 + i;
    memset(out, -1, sizeof out);
    MPI_Scatterv(buf, counts, displs, MPI_INT, out, rank + 1, MPI_INT, p - 1, MPI_COMM_WORLD);
    say("scatterv", out, rank + 1);
    /* Alltoallv: rank r sends j + 1 elements to rank j, receives r + 1 from each. */
    for (int j = 0, at = 0; j < p; j++) {
        counts[j] = j + 1;
        displs[j] = at;
        at += j + 1;
        rcounts[j] = rank + 1;
        rdispls[j] = j * (rank + 2);
    }
    for (int i = 0; i < 32; i++)
        buf[i] = rank * 1000 + i;
    memset(out, -1, sizeof out);
    MPI_Alltoallv(buf, counts, displs, MPI_INT, out, rcounts, rdispls, MPI_INT, MPI_COMM_WORLD);
    say("alltoallv", out, rdispls[p - 1] + rcounts[p - 1]);
    /* Alltoallw: a datatype per peer, byte displacements. To an even rank j go j + 1 ints,
     * to an odd one 2 ints a vector type picks (every other int); rank j takes each
     * rank's block as ints (even j) or as one pair type (odd j), with gaps between. */
    MPI_Datatype every_other, pair2, wst[8], wrt[8];
    MPI_Type_vector(2, 1, 2, MPI_INT, &every_other);
    MPI_Type_contiguous(2, MPI_INT, &pair2);
    MPI_Type_commit(&every_other);
    MPI_Type_commit(&pair2);
    int wsc[8], wsd[8], wrc[8], wrd[8], odd = rank % 2, wstep = odd ? 3 : rank + 2;
    for (int j = 0, at = 0; j < p; j++) {
        wst[j] = j % 2 ? every_other : MPI_INT;
        wsc[j] = j % 2 ? 1 : j + 1;
        wsd[j] = at * (int)sizeof(int);
        at += j % 2 ? 3 : j + 1;
        wrt[j] = odd ? pair2 : MPI_INT;
        wrc[j] = odd ? 1 : rank + 1;
        wrd[j] = j * wstep * (int)sizeof(int);
    }
    int wn = (p - 1) * wstep + (odd ? 2 : rank + 1), wout[64];
    for (int i = 0; i < 32; i++)
        buf[i] = rank * 1000 + i;
    memset(out, -1, sizeof out);
    MPI_Alltoallw(buf, wsc, wsd, wst, out, wrc, wrd, wrt, MPI_COMM_WORLD);
    say("alltoallw", out, wn);
    MPI_Request wreq;
    memset(wout, -1, sizeof wout);
    MPI_Ialltoallw(buf, wsc, wsd, wst, wout, wrc, wrd, wrt, MPI_COMM_WORLD, &wreq);
    MPI_Wait(&wreq, MPI_STATUS_IGNORE);
    say("ialltoallw", wout, wn);
    /* In place: two ints a block everywhere (as a pair type at odd ranks), 3 ints apart. */
    memset(out, -1, sizeof out);
    for (int j = 0; j < p; j++) {
        wrc[j] = odd ? 1 : 2;
        wrd[j] = j * 3 * (int)sizeof(int);
        out[j * 3] = rank * 100 + j * 10;
        out[j * 3 + 1] = rank * 100 + j * 10 + 1;
    }
    MPI_Alltoallw(MPI_IN_PLACE, NULL, NULL, NULL, out, wrc, wrd, wrt, MPI_COMM_WORLD);
    say("alltoallw in place", out, 3 * p - 1);
    MPI_Type_free(&every_other);
    MPI_Type_free(&pair2);
    /* Scans, reduce-scatter, local reduction. */
    int x[2] = {rank + 1, 10 - rank}, y[2] = {-1, -1};
    MPI_Scan(x, y, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    say("scan", y, 2);
    MPI_Scan(MPI_IN_PLACE, x, 2, MPI_INT, MPI_PROD, MPI_COMM_WORLD);
    say("scan in place", x, 2);
    x[0] = rank + 1, x[1] = 10 - rank;
    MPI_Exscan(x, y, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (rank > 0)
        say("exscan", y, 2);
    for (int i = 0; i < 2 * p; i++)
        buf[i] = rank + i;
    MPI_Reduce_scatter_block(buf, y, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    say("reduce_scatter_block", y, 2);
    MPI_Reduce_scatter_block(MPI_IN_PLACE, buf, 2, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    say("reduce_scatter_block in place", buf, 2);
    double din[3] = {1.5, -2, 4}, dio[3] = {2, 3, -1};
    MPI_Reduce_local(din, dio, 3, MPI_DOUBLE, MPI_PROD);
    for (int i = 0; i < 3; i++)
        out[i] = (int)(dio[i] * 10);
    say("reduce_local", out, 3);
    /* Communicators: split by parity (reversed by key), dup, shared-memory split. */
    MPI_Comm half, copy, node, none;
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, -rank, &half);
    int hr, hs, sum;
    MPI_Comm_rank(half, &hr);
    MPI_Comm_size(half, &hs);
    MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, half);
    int h[3] = {hr, hs, sum};
    say("split rank size sum", h, 3);
    MPI_Comm_dup(half, &copy);
    MPI_Bcast(&rank, 0, MPI_INT, 0, copy);
    int b = rank;
    MPI_Bcast(&b, 1, MPI_INT, 0, copy);
    say("dup bcast", &b, 1);
    MPI_Comm_split(MPI_COMM_WORLD, rank == 0 ? MPI_UNDEFINED : 1, 0, &none);
    int is_null = none == MPI_COMM_NULL;
    say("undefined color gives null", &is_null, 1);
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    MPI_Comm_size(node, &hs);
    say("shared size", &hs, 1);
    MPI_Comm_free(&copy);
    MPI_Comm_free(&half);
    MPI_Comm_free(&node);
    if (none != MPI_COMM_NULL)
        MPI_Comm_free(&none);
    int freed = copy == MPI_COMM_NULL && half == MPI_COMM_NULL;
    say("freed", &freed, 1);
    /* Groups, and communicators made from them. */
    MPI_Group wg, evens, odds, rev, empty_copy;
    MPI_Comm_group(MPI_COMM_WORLD, &wg);
    int g[8], ng = 0, gsize, grank;
    MPI_Group_size(wg, &gsize);
    MPI_Group_rank(wg, &grank);
    for (int i = 0; i < p; i += 2)
        g[ng++] = i;
    MPI_Group_incl(wg, ng, g, &evens);
    MPI_Group_excl(wg, ng, g, &odds);
    int er, os;
    MPI_Group_rank(evens, &er);
    MPI_Group_size(odds, &os);
    int gi[4] = {gsize, grank, er == MPI_UNDEFINED ? -1 : er, os};
    say("group size rank, evens rank, odds size", gi, 4);
    int from[8], to[8];
    for (int i = 0; i < ng; i++)
        from[i] = i;
    MPI_Group_translate_ranks(evens, ng, from, wg, to);
    say("evens in world", to, ng);
    int all[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    MPI_Group_translate_ranks(wg, p, all, odds, to);
    for (int i = 0; i < p; i++)
        to[i] = to[i] == MPI_UNDEFINED ? -1 : to[i];
    say("world in odds", to, p);
    /* MPI_PROC_NULL translates to itself. */
    int with_null[3] = {MPI_PROC_NULL, 0, MPI_PROC_NULL};
    MPI_Group_translate_ranks(wg, 3, with_null, evens, to);
    for (int i = 0; i < 3; i++)
        to[i] = to[i] == MPI_PROC_NULL ? -100 : to[i];
    say("proc null and 0 in evens (-100: MPI_PROC_NULL)", to, 3);
    for (int i = 0; i < p; i++)
        g[i] = p - 1 - i;
    MPI_Group_incl(wg, p, g, &rev);
    int cmp[4];
    MPI_Group_compare(wg, wg, &cmp[0]);
    MPI_Group_compare(wg, rev, &cmp[1]);
    MPI_Group_compare(wg, evens, &cmp[2]);
    empty_copy = MPI_GROUP_EMPTY;
    MPI_Group_size(empty_copy, &cmp[3]);
    say("group compare ident similar unequal, empty size", cmp, 4);
    /* Set operations on groups, and ranges of ranks, as world ranks. */
    MPI_Group made[5];
    MPI_Group_union(evens, rev, &made[0]);
    MPI_Group_intersection(rev, evens, &made[1]);
    MPI_Group_difference(wg, evens, &made[2]);
    int down[1][3] = {{p - 1, 0, -2}}, every3[1][3] = {{0, p - 1, 3}};
    MPI_Group_range_incl(wg, 1, down, &made[3]);
    MPI_Group_range_excl(wg, 1, every3, &made[4]);
    const char *made_names[5] = {"union evens rev", "intersection rev evens", "difference world evens",
                                 "range incl p-1 down by 2", "range excl every third"};
    for (int m = 0; m < 5; m++) {
        int msize, in_world[8];
        MPI_Group_size(made[m], &msize);
        MPI_Group_translate_ranks(made[m], msize, all, wg, in_world);
        say(made_names[m], in_world, msize);
        MPI_Group_free(&made[m]);
    }
    MPI_Comm ec;
    MPI_Comm_create(MPI_COMM_WORLD, evens, &ec);
    if (ec == MPI_COMM_NULL) {
        say("create: not a member", &rank, 1);
    } else {
        int esz, erk, esum;
        MPI_Comm_size(ec, &esz);
        MPI_Comm_rank(ec, &erk);
        MPI_Allreduce(&rank, &esum, 1, MPI_INT, MPI_SUM, ec);
        int e3[3] = {esz, erk, esum};
        say("create: size rank sum", e3, 3);
        MPI_Comm_free(&ec);
    }
    /* Made by the members alone: the evens and the odds each with their own group (the same
     * tag: disjoint groups), world collectives between and after; then the world reversed;
     * a rank outside the group gets MPI_COMM_NULL at once. */
    MPI_Comm gc;
    MPI_Comm_create_group(MPI_COMM_WORLD, rank % 2 ? odds : evens, 7, &gc);
    int msz, mrk, msum, wsum;
    MPI_Comm_size(gc, &msz);
    MPI_Comm_rank(gc, &mrk);
    MPI_Allreduce(&rank, &msum, 1, MPI_INT, MPI_SUM, gc);
    MPI_Allreduce(&rank, &wsum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    int m4[4] = {msz, mrk, msum, wsum};
    say("create_group own half: size rank sum, world sum", m4, 4);
    MPI_Comm_free(&gc);
    if (rank % 2 == 0) {
        MPI_Comm_create_group(MPI_COMM_WORLD, evens, 3, &gc);
        MPI_Comm_rank(gc, &mrk);
        MPI_Bcast(&mrk, 1, MPI_INT, 0, gc);
        say("create_group evens only: root's rank", &mrk, 1);
        MPI_Comm_free(&gc);
    }
    MPI_Comm_create_group(MPI_COMM_WORLD, rev, 0, &gc);
    MPI_Comm_rank(gc, &mrk);
    int left = -1;
    MPI_Sendrecv(&rank, 1, MPI_INT, (mrk + 1) % p, 0, &left, 1, MPI_INT, (mrk + p - 1) % p, 0, gc, MPI_STATUS_IGNORE);
    int m2[2] = {mrk, left};
    say("create_group reversed: rank, world rank of the previous", m2, 2);
    MPI_Comm_free(&gc);
    MPI_Comm_create_group(MPI_COMM_WORLD, MPI_GROUP_EMPTY, 0, &gc);
    int no_one = gc == MPI_COMM_NULL;
    say("create_group of no one is null", &no_one, 1);
    MPI_Comm dupw, revw, halfw;
    MPI_Comm_dup(MPI_COMM_WORLD, &dupw);
    MPI_Comm_split(MPI_COMM_WORLD, 0, -rank, &revw);
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &halfw);
    int cc[4];
    MPI_Comm_compare(MPI_COMM_WORLD, MPI_COMM_WORLD, &cc[0]);
    MPI_Comm_compare(MPI_COMM_WORLD, dupw, &cc[1]);
    MPI_Comm_compare(MPI_COMM_WORLD, revw, &cc[2]);
    MPI_Comm_compare(MPI_COMM_WORLD, halfw, &cc[3]);
    int want[4] = {MPI_IDENT, MPI_CONGRUENT, MPI_SIMILAR, MPI_UNEQUAL};
    for (int i = 0; i < 4; i++)
        cc[i] = cc[i] == want[i];
    say("comm compare as expected", cc, 4);
    char cname[MPI_MAX_OBJECT_NAME];
    int clen, named[3];
    MPI_Comm_get_name(MPI_COMM_WORLD, cname, &clen);
    named[0] = strcmp(cname, "MPI_COMM_WORLD") == 0 && clen == 14;
    MPI_Comm_set_name(dupw, "my copy");
    MPI_Comm_get_name(dupw, cname, &clen);
    named[1] = strcmp(cname, "my copy") == 0 && clen == 7;
    MPI_Comm_get_name(halfw, cname, &clen);
    named[2] = clen == 0;
    say("names", named, 3);
    /* Datatype and window names; MPI_Pcontrol, with and without more arguments. */
    char tname[MPI_MAX_OBJECT_NAME];
    int tlen, tnamed[6];
    MPI_Type_get_name(MPI_INT, tname, &tlen);
    tnamed[0] = strcmp(tname, "MPI_INT") == 0 && tlen == 7;
    MPI_Datatype pair_t;
    MPI_Type_contiguous(2, MPI_DOUBLE, &pair_t);
    MPI_Type_get_name(pair_t, tname, &tlen);
    tnamed[1] = tlen == 0 && tname[0] == '\0';
    MPI_Type_set_name(pair_t, "pair of doubles");
    MPI_Type_get_name(pair_t, tname, &tlen);
    tnamed[2] = strcmp(tname, "pair of doubles") == 0 && tlen == 15;
    MPI_Type_free(&pair_t);
    MPI_Win nw;
    void *nbase;
    MPI_Win_allocate(8, 1, MPI_INFO_NULL, MPI_COMM_SELF, &nbase, &nw);
    MPI_Win_get_name(nw, tname, &tlen);
    tnamed[3] = tlen == 0;
    MPI_Win_set_name(nw, "halo");
    MPI_Win_get_name(nw, tname, &tlen);
    tnamed[4] = strcmp(tname, "halo") == 0 && tlen == 4;
    MPI_Win_free(&nw);
    tnamed[5] = MPI_Pcontrol(1) == MPI_SUCCESS && MPI_Pcontrol(2, "phase", 3) == MPI_SUCCESS;
    say("type and window names, pcontrol", tnamed, 6);
    int *ub, found, *wg_attr, found2;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &found);
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_WTIME_IS_GLOBAL, &wg_attr, &found2);
    int at[3] = {found, found && *ub >= 32767, found2 ? (*wg_attr == 0 || *wg_attr == 1) : 1};
    say("attributes", at, 3);
    MPI_Comm_free(&dupw);
    MPI_Comm_free(&revw);
    MPI_Comm_free(&halfw);
    MPI_Group_free(&wg);
    MPI_Group_free(&evens);
    MPI_Group_free(&odds);
    MPI_Group_free(&rev);
    int gfreed = wg == MPI_GROUP_NULL && rev == MPI_GROUP_NULL;
    say("groups freed", &gfreed, 1);
    nonblocking();
    nonblocking_v();
    idups();
    attributes();
    aliases();
    lengths();
    MPI_Finalize();
    return 0;
}
