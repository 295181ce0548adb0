/* Inter-communicators: MPI_Intercomm_create between the even and the odd ranks of the world,
 * point-to-point messages across it (ranks of the other group, MPI_ANY_SOURCE, probes), its
 * queries (MPI_Comm_test_inter, _remote_size, _remote_group, MPI_Comm_compare), its
 * collectives (MPI_Barrier, MPI_Bcast and MPI_Reduce with MPI_ROOT and MPI_PROC_NULL,
 * MPI_Allreduce with a predefined and a non-commutative operation of the program's,
 * MPI_Gather, MPI_Scatter, MPI_Allgather, MPI_Alltoall, their v-forms, MPI_Alltoallw and the
 * reduce-scatters), the communicators made from it (MPI_Comm_dup, MPI_Comm_split,
 * MPI_Comm_create, MPI_Intercomm_merge, MPI_Comm_idup), the nonblocking collectives
 * (several in flight at once, and beside a blocking one), and their errors. Printed as
 * "rank: what = values" lines; the test compares them with MPICH's. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "say.h"

#define MAXP 16

/* acc = 2 * in + acc: not commutative, so the order of the operands shows. */
static void twice_plus(void *in, void *inout, int *len, MPI_Datatype *type)
{
    (void)type;
    for (int i = 0; i < *len; i++)
        ((int *)inout)[i] = 2 * ((int *)in)[i] + ((int *)inout)[i];
}

static void list(char *out, size_t room, const int *v, int n)
{
    size_t used = 0;
    out[0] = '\0';
    for (int i = 0; i < n && used < room; i++)
        used += (size_t)snprintf(out + used, room - used, "%s%d", i ? " " : "", v[i]);
}

/* The world ranks of the other group, in its order. */
static void remote_world(MPI_Comm inter, char *out, size_t room)
{
    MPI_Group remote, world;
    int n, ranks[MAXP], worlds[MAXP];
    MPI_Comm_remote_group(inter, &remote);
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    MPI_Group_size(remote, &n);
    for (int i = 0; i < n; i++)
        ranks[i] = i;
    MPI_Group_translate_ranks(remote, n, ranks, world, worlds);
    list(out, room, worlds, n);
    MPI_Group_free(&remote);
    MPI_Group_free(&world);
}

static void messages(MPI_Comm inter, const char *what)
{
    int lrank, rsize;
    MPI_Comm_rank(inter, &lrank);
    MPI_Comm_remote_size(inter, &rsize);
    /* Each rank sends its world rank to every rank of the other group, tag = that rank. */
    MPI_Request reqs[MAXP];
    int mine = rank;
    for (int j = 0; j < rsize; j++)
        MPI_Isend(&mine, 1, MPI_INT, j, j, inter, &reqs[j]);
    int got[MAXP];
    for (int j = 0; j < rsize; j++) {
        MPI_Status st;
        int v = -1, flag = 0;
        MPI_Probe(MPI_ANY_SOURCE, lrank, inter, &st);
        MPI_Iprobe(st.MPI_SOURCE, lrank, inter, &flag, MPI_STATUS_IGNORE);
        MPI_Recv(&v, 1, MPI_INT, st.MPI_SOURCE, lrank, inter, &st);
        got[st.MPI_SOURCE] = v;
        if (!flag)
            SAY("%s: iprobe found nothing from %d", what, st.MPI_SOURCE);
    }
    MPI_Status sts[MAXP];
    MPI_Waitall(rsize, reqs, sts);
    char line[256];
    list(line, sizeof line, got, rsize);
    SAY("%s: world ranks from the other group = %s", what, line);
    /* With the same rank of the other group, where it has one. */
    int back = -1, partner = lrank < rsize ? lrank : MPI_PROC_NULL;
    MPI_Sendrecv(&mine, 1, MPI_INT, partner, 99, &back, 1, MPI_INT, partner, 99, inter, MPI_STATUS_IGNORE);
    SAY("%s: sendrecv with the other group's rank %d = %d", what, lrank, back);
}

static void collectives(MPI_Comm inter, int low)
{
    int lrank, lsize, rsize;
    MPI_Comm_rank(inter, &lrank);
    MPI_Comm_size(inter, &lsize);
    MPI_Comm_remote_size(inter, &rsize);
    MPI_Barrier(inter);

    /* The low group's rank 0 broadcasts; then the high group's last rank. */
    int v[3] = {rank, rank + 1, rank + 2};
    int root = low ? (lrank == 0 ? MPI_ROOT : MPI_PROC_NULL) : 0;
    MPI_Bcast(v, 3, MPI_INT, root, inter);
    SAY("bcast from the low group = %d %d %d", v[0], v[1], v[2]);
    v[0] = 100 + rank;
    root = low ? rsize - 1 : (lrank == lsize - 1 ? MPI_ROOT : MPI_PROC_NULL);
    MPI_Bcast(v, 1, MPI_INT, root, inter);
    SAY("bcast from the high group = %d", v[0]);

    int in[2] = {rank, 1 << rank}, out[2] = {-1, -1};
    MPI_Allreduce(in, out, 2, MPI_INT, MPI_SUM, inter);
    SAY("allreduce sum = %d %d", out[0], out[1]);
    MPI_Op twice;
    MPI_Op_create(twice_plus, 0, &twice);
    out[0] = out[1] = -1;
    MPI_Allreduce(in, out, 2, MPI_INT, twice, inter);
    SAY("allreduce of the program's operation = %d %d", out[0], out[1]);

    /* Reduce to the high group's rank 0 (maximum), then to the low group's (the program's). */
    out[0] = out[1] = -1;
    root = low ? 0 : (lrank == 0 ? MPI_ROOT : MPI_PROC_NULL);
    MPI_Reduce(in, out, 2, MPI_INT, MPI_MAX, root, inter);
    SAY("reduce max at the high group's first = %d %d", out[0], out[1]);
    out[0] = out[1] = -1;
    root = low ? (lrank == 0 ? MPI_ROOT : MPI_PROC_NULL) : 0;
    MPI_Reduce(in, out, 2, MPI_INT, twice, root, inter);
    SAY("reduce of the program's at the low group's first = %d %d", out[0], out[1]);
    MPI_Op_free(&twice);

    /* Gather the high group's pairs at the low group's first; scatter back from it. */
    int pair[2] = {rank, -rank}, all[2 * MAXP];
    for (int i = 0; i < 2 * MAXP; i++)
        all[i] = -1;
    root = low ? (lrank == 0 ? MPI_ROOT : MPI_PROC_NULL) : 0;
    MPI_Gather(pair, 2, MPI_INT, all, 2, MPI_INT, root, inter);
    char line[256];
    list(line, sizeof line, all, 2 * rsize);
    SAY("gather at the low group's first = %s", line);
    for (int i = 0; i < 2 * rsize; i++)
        all[i] = 1000 * rank + i;
    int one[2] = {-1, -1};
    MPI_Scatter(all, 2, MPI_INT, one, 2, MPI_INT, root, inter);
    SAY("scatter from the low group's first = %d %d", one[0], one[1]);

    for (int i = 0; i < 2 * MAXP; i++)
        all[i] = -1;
    MPI_Allgather(pair, 2, MPI_INT, all, 2, MPI_INT, inter);
    list(line, sizeof line, all, 2 * rsize);
    SAY("allgather = %s", line);

    /* The v-forms: rank j of a group gives j + 1 elements; blocks lie apart, a gap between. */
    int counts[MAXP], displs[MAXP], at = 0, vals[MAXP], many[MAXP * (MAXP + 2)];
    for (int j = 0; j < rsize; j++) {
        counts[j] = j + 1;
        displs[j] = at;
        at += j + 2;
    }
    for (int i = 0; i <= lrank; i++)
        vals[i] = 10 * rank + i;
    for (int i = 0; i < MAXP * (MAXP + 2); i++)
        many[i] = -1;
    MPI_Gatherv(vals, lrank + 1, MPI_INT, many, counts, displs, MPI_INT, root, inter);
    list(line, sizeof line, many, at);
    SAY("gatherv at the low group's first = %s", line);
    for (int i = 0; i < at; i++)
        many[i] = 1000 * rank + i;
    for (int i = 0; i < MAXP; i++)
        vals[i] = -1;
    MPI_Scatterv(many, counts, displs, MPI_INT, vals, lrank + 1, MPI_INT, root, inter);
    list(line, sizeof line, vals, lrank + 1);
    SAY("scatterv from the low group's first = %s", line);
    for (int i = 0; i <= lrank; i++)
        vals[i] = 10 * rank + i;
    for (int i = 0; i < MAXP * (MAXP + 2); i++)
        many[i] = -1;
    MPI_Allgatherv(vals, lrank + 1, MPI_INT, many, counts, displs, MPI_INT, inter);
    list(line, sizeof line, many, at);
    SAY("allgatherv = %s", line);
    /* To rank j of the other group 1 + (lrank + j) % 2 elements, each way. */
    int scounts[MAXP], sdispls[MAXP], rcounts[MAXP], rdispls[MAXP], sbytes[MAXP], rbytes[MAXP];
    int out_at = 0, in_at = 0, outv[3 * MAXP], inv[3 * MAXP];
    for (int j = 0; j < rsize; j++) {
        scounts[j] = rcounts[j] = 1 + (lrank + j) % 2;
        sdispls[j] = out_at;
        rdispls[j] = in_at;
        sbytes[j] = out_at * (int)sizeof(int);
        rbytes[j] = in_at * (int)sizeof(int);
        out_at += scounts[j];
        in_at += rcounts[j] + 1;
    }
    for (int i = 0; i < out_at; i++)
        outv[i] = 100 * rank + i;
    for (int i = 0; i < 3 * MAXP; i++)
        inv[i] = -1;
    MPI_Alltoallv(outv, scounts, sdispls, MPI_INT, inv, rcounts, rdispls, MPI_INT, inter);
    list(line, sizeof line, inv, in_at);
    SAY("alltoallv = %s", line);
    MPI_Datatype tys[MAXP];
    for (int j = 0; j < rsize; j++)
        tys[j] = MPI_INT;
    for (int i = 0; i < 3 * MAXP; i++)
        inv[i] = -1;
    MPI_Alltoallw(outv, scounts, sbytes, tys, inv, rcounts, rbytes, tys, inter);
    list(line, sizeof line, inv, in_at);
    SAY("alltoallw = %s", line);

    /* Reduce-scatters: vectors of lsize x rsize elements on both sides. */
    int n = lsize * rsize, vec[MAXP * MAXP], rc[MAXP], res[MAXP * MAXP];
    for (int k = 0; k < n; k++)
        vec[k] = 100 * rank + k;
    for (int i = 0; i < lsize; i++)
        rc[i] = rsize + (i == 0 ? lsize - 1 : -1);
    for (int k = 0; k < n; k++)
        res[k] = -1;
    MPI_Reduce_scatter(vec, res, rc, MPI_INT, MPI_SUM, inter);
    list(line, sizeof line, res, rc[lrank]);
    SAY("reduce_scatter sum = %s", line);
    for (int k = 0; k < n; k++)
        res[k] = -1;
    MPI_Reduce_scatter_block(vec, res, rsize, MPI_INT, MPI_MAX, inter);
    list(line, sizeof line, res, rsize);
    SAY("reduce_scatter_block max = %s", line);
    MPI_Op_create(twice_plus, 0, &twice);
    MPI_Reduce_scatter_block(vec, res, rsize, MPI_INT, twice, inter);
    list(line, sizeof line, res, rsize);
    SAY("reduce_scatter_block of the program's = %s", line);
    MPI_Op_free(&twice);

    int blocks[MAXP], back[MAXP];
    for (int j = 0; j < rsize; j++) {
        blocks[j] = 100 * rank + j;
        back[j] = -1;
    }
    MPI_Alltoall(blocks, 1, MPI_INT, back, 1, MPI_INT, inter);
    list(line, sizeof line, back, rsize);
    SAY("alltoall = %s", line);
}

/* The nonblocking collectives, several in flight at once, each group's results printed as
 * the blocking ones'. */
static void nonblocking(MPI_Comm inter, int low)
{
    int lrank, lsize, rsize;
    MPI_Comm_rank(inter, &lrank);
    MPI_Comm_size(inter, &lsize);
    MPI_Comm_remote_size(inter, &rsize);
    MPI_Request r[8];
    char line[256];

    /* A barrier, two broadcasts (one of a strided type) and two all-reductions in flight. */
    int v[3] = {rank, rank + 1, rank + 2}, w[6] = {rank, -1, rank + 1, -1, rank + 2, -1};
    int root = low ? (lrank == 0 ? MPI_ROOT : MPI_PROC_NULL) : 0;
    /* From the high group's first rank: MPICH 4.0.2's MPI_Ibcast on an inter-communicator
     * delivers another rank's buffer where the root is not the other group's first (the Rust
     * API's test checks such a root). */
    int back = low ? 0 : (lrank == 0 ? MPI_ROOT : MPI_PROC_NULL);
    MPI_Datatype strided;
    MPI_Type_vector(3, 1, 2, MPI_INT, &strided);
    MPI_Type_commit(&strided);
    int in[2] = {rank, 1 << rank}, sum[2] = {-1, -1}, prog[2] = {-1, -1};
    MPI_Op twice;
    MPI_Op_create(twice_plus, 0, &twice);
    MPI_Ibarrier(inter, &r[0]);
    MPI_Ibcast(v, 3, MPI_INT, root, inter, &r[1]);
    MPI_Ibcast(w, 1, strided, back, inter, &r[2]);
    MPI_Iallreduce(in, sum, 2, MPI_INT, MPI_SUM, inter, &r[3]);
    MPI_Iallreduce(in, prog, 2, MPI_INT, twice, inter, &r[4]);
    MPI_Waitall(5, r, MPI_STATUSES_IGNORE);
    SAY("ibcast from the low group = %d %d %d", v[0], v[1], v[2]);
    list(line, sizeof line, w, 6);
    SAY("ibcast of a strided type from the high group's first = %s", line);
    SAY("iallreduce sum = %d %d, of the program's = %d %d", sum[0], sum[1], prog[0], prog[1]);
    MPI_Type_free(&strided);

    /* Reductions to a root of each group: a predefined operation and the program's. */
    int max[2] = {-1, -1}, mine[2] = {-1, -1};
    MPI_Ireduce(in, max, 2, MPI_INT, MPI_MAX, low ? 0 : (lrank == 0 ? MPI_ROOT : MPI_PROC_NULL), inter, &r[0]);
    MPI_Ireduce(in, mine, 2, MPI_INT, twice, root, inter, &r[1]);
    MPI_Waitall(2, r, MPI_STATUSES_IGNORE);
    SAY("ireduce max at the high group's first = %d %d, of the program's at the low group's = %d %d", max[0],
        max[1], mine[0], mine[1]);

    /* Gather, scatter, allgather, alltoall. */
    int pair[2] = {rank, -rank}, all[2 * MAXP], spread[2 * MAXP], one[2] = {-1, -1}, every[2 * MAXP];
    int blocks[MAXP], got[MAXP];
    for (int i = 0; i < 2 * MAXP; i++) {
        all[i] = every[i] = -1;
        spread[i] = 1000 * rank + i;
    }
    for (int j = 0; j < rsize; j++) {
        blocks[j] = 100 * rank + j;
        got[j] = -1;
    }
    MPI_Igather(pair, 2, MPI_INT, all, 2, MPI_INT, root, inter, &r[0]);
    MPI_Iscatter(spread, 2, MPI_INT, one, 2, MPI_INT, root, inter, &r[1]);
    MPI_Iallgather(pair, 2, MPI_INT, every, 2, MPI_INT, inter, &r[2]);
    MPI_Ialltoall(blocks, 1, MPI_INT, got, 1, MPI_INT, inter, &r[3]);
    MPI_Waitall(4, r, MPI_STATUSES_IGNORE);
    list(line, sizeof line, all, 2 * rsize);
    SAY("igather at the low group's first = %s", line);
    SAY("iscatter from the low group's first = %d %d", one[0], one[1]);
    list(line, sizeof line, every, 2 * rsize);
    SAY("iallgather = %s", line);
    list(line, sizeof line, got, rsize);
    SAY("ialltoall = %s", line);

    /* The v-forms, laid out as in the blocking ones. */
    int counts[MAXP], displs[MAXP], at = 0, vals[MAXP], many[MAXP * (MAXP + 2)], allv[MAXP * (MAXP + 2)];
    int tovals[MAXP];
    for (int j = 0; j < rsize; j++) {
        counts[j] = j + 1;
        displs[j] = at;
        at += j + 2;
    }
    for (int i = 0; i <= lrank; i++)
        vals[i] = 10 * rank + i;
    for (int i = 0; i < MAXP * (MAXP + 2); i++) {
        many[i] = allv[i] = -1;
    }
    int from[MAXP * (MAXP + 2)];
    for (int i = 0; i < MAXP * (MAXP + 2); i++)
        from[i] = 1000 * rank + i;
    for (int i = 0; i < MAXP; i++)
        tovals[i] = -1;
    MPI_Igatherv(vals, lrank + 1, MPI_INT, many, counts, displs, MPI_INT, root, inter, &r[0]);
    MPI_Iscatterv(from, counts, displs, MPI_INT, tovals, lrank + 1, MPI_INT, root, inter, &r[1]);
    MPI_Iallgatherv(vals, lrank + 1, MPI_INT, allv, counts, displs, MPI_INT, inter, &r[2]);
    int scounts[MAXP], sdispls[MAXP], rcounts[MAXP], rdispls[MAXP], sbytes[MAXP], rbytes[MAXP];
    int out_at = 0, in_at = 0, outv[3 * MAXP], inv[3 * MAXP], inw[3 * MAXP];
    MPI_Datatype tys[MAXP];
    for (int j = 0; j < rsize; j++) {
        scounts[j] = rcounts[j] = 1 + (lrank + j) % 2;
        sdispls[j] = out_at;
        rdispls[j] = in_at;
        sbytes[j] = out_at * (int)sizeof(int);
        rbytes[j] = in_at * (int)sizeof(int);
        out_at += scounts[j];
        in_at += rcounts[j] + 1;
        tys[j] = MPI_INT;
    }
    for (int i = 0; i < out_at; i++)
        outv[i] = 100 * rank + i;
    for (int i = 0; i < 3 * MAXP; i++)
        inv[i] = inw[i] = -1;
    MPI_Ialltoallv(outv, scounts, sdispls, MPI_INT, inv, rcounts, rdispls, MPI_INT, inter, &r[3]);
    MPI_Ialltoallw(outv, scounts, sbytes, tys, inw, rcounts, rbytes, tys, inter, &r[4]);
    MPI_Waitall(5, r, MPI_STATUSES_IGNORE);
    list(line, sizeof line, many, at);
    SAY("igatherv at the low group's first = %s", line);
    list(line, sizeof line, tovals, lrank + 1);
    SAY("iscatterv from the low group's first = %s", line);
    list(line, sizeof line, allv, at);
    SAY("iallgatherv = %s", line);
    list(line, sizeof line, inv, in_at);
    SAY("ialltoallv = %s", line);
    list(line, sizeof line, inw, in_at);
    SAY("ialltoallw = %s", line);

    /* Reduce-scatters, as in the blocking ones. */
    int n = lsize * rsize, vec[MAXP * MAXP], rc[MAXP], res[MAXP * MAXP], blk[MAXP], blk2[MAXP];
    for (int k = 0; k < n; k++) {
        vec[k] = 100 * rank + k;
        res[k] = -1;
    }
    for (int i = 0; i < lsize; i++)
        rc[i] = rsize + (i == 0 ? lsize - 1 : -1);
    for (int j = 0; j < MAXP; j++)
        blk[j] = blk2[j] = -1;
    MPI_Ireduce_scatter(vec, res, rc, MPI_INT, MPI_SUM, inter, &r[0]);
    MPI_Ireduce_scatter_block(vec, blk, rsize, MPI_INT, MPI_MAX, inter, &r[1]);
    MPI_Ireduce_scatter_block(vec, blk2, rsize, MPI_INT, twice, inter, &r[2]);
    MPI_Waitall(3, r, MPI_STATUSES_IGNORE);
    list(line, sizeof line, res, rc[lrank]);
    SAY("ireduce_scatter sum = %s", line);
    list(line, sizeof line, blk, rsize);
    SAY("ireduce_scatter_block max = %s", line);
    list(line, sizeof line, blk2, rsize);
    SAY("ireduce_scatter_block of the program's = %s", line);
    MPI_Op_free(&twice);

    /* A blocking collective between nonblocking ones in flight. */
    int x = rank, y = -1, z = -1;
    MPI_Iallreduce(&x, &y, 1, MPI_INT, MPI_SUM, inter, &r[0]);
    MPI_Allreduce(&x, &z, 1, MPI_INT, MPI_MAX, inter);
    MPI_Ibarrier(inter, &r[1]);
    MPI_Waitall(2, r, MPI_STATUSES_IGNORE);
    SAY("iallreduce around a blocking allreduce = %d, blocking max = %d", y, z);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);

    /* The evens (low) and the odds; each group's leader is its first rank, and the two
     * leaders meet in the world (ranks 0 and 1). */
    int low = rank % 2 == 0;
    MPI_Comm half, inter;
    MPI_Comm_split(MPI_COMM_WORLD, !low, rank, &half);
    MPI_Intercomm_create(half, 0, MPI_COMM_WORLD, low ? 1 : 0, 7, &inter);
    MPI_Comm_set_errhandler(inter, MPI_ERRORS_RETURN);
    int flag = -1, lrank, lsize, rsize;
    MPI_Comm_test_inter(inter, &flag);
    MPI_Comm_rank(inter, &lrank);
    MPI_Comm_size(inter, &lsize);
    MPI_Comm_remote_size(inter, &rsize);
    char line[256];
    remote_world(inter, line, sizeof line);
    SAY("inter: test_inter = %d, rank %d of %d, remote size %d, remote world ranks %s", flag, lrank, lsize, rsize,
        line);
    MPI_Comm_test_inter(half, &flag);
    SAY("half: test_inter = %d", flag);

    messages(inter, "inter");
    collectives(inter, low);
    nonblocking(inter, low);

    /* A duplicate: its own messages, the same groups. */
    MPI_Comm dup;
    int cmp = -1;
    MPI_Comm_dup(inter, &dup);
    MPI_Comm_compare(inter, dup, &cmp);
    SAY("compare with its dup = %d (congruent %d)", cmp, MPI_CONGRUENT);
    MPI_Comm_compare(inter, inter, &cmp);
    SAY("compare with itself = %d (ident %d)", cmp, MPI_IDENT);
    MPI_Comm_compare(inter, MPI_COMM_WORLD, &cmp);
    SAY("compare with the world = %d (unequal %d)", cmp, MPI_UNEQUAL);
    messages(dup, "dup");
    collectives(dup, low);
    nonblocking(dup, low);

    /* Nonblocking duplicates beside a nonblocking barrier and a blocking duplicate. */
    MPI_Comm idup[2], bdup;
    MPI_Request ir[3];
    MPI_Comm_idup(inter, &idup[0], &ir[0]);
    MPI_Ibarrier(inter, &ir[1]);
    MPI_Comm_idup(inter, &idup[1], &ir[2]);
    MPI_Comm_dup(inter, &bdup);
    MPI_Waitall(3, ir, MPI_STATUSES_IGNORE);
    for (int i = 0; i < 2; i++) {
        int s = -1, t = -1;
        MPI_Comm_test_inter(idup[i], &flag);
        MPI_Comm_remote_size(idup[i], &t);
        MPI_Allreduce(&rank, &s, 1, MPI_INT, MPI_SUM, idup[i]);
        SAY("idup %d: test_inter %d, remote size %d, allreduce of the other side's world ranks = %d", i, flag, t, s);
        MPI_Comm_free(&idup[i]);
    }
    messages(bdup, "dup beside idups");
    MPI_Comm_free(&bdup);

    /* Merged, the high group last (the odds, then the evens); then with both asking low, in
     * MPICH's order: the group of the lower first world rank (the evens) first. */
    MPI_Comm merged;
    int mrank, msize, sum = -1, order[MAXP];
    MPI_Intercomm_merge(inter, !low, &merged);
    MPI_Comm_rank(merged, &mrank);
    MPI_Comm_size(merged, &msize);
    MPI_Comm_test_inter(merged, &flag);
    MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, merged);
    MPI_Allgather(&rank, 1, MPI_INT, order, 1, MPI_INT, merged);
    list(line, sizeof line, order, msize);
    SAY("merged (odds high): rank %d of %d, test_inter %d, sum of world ranks %d, in order %s", mrank, msize, flag,
        sum, line);
    MPI_Comm_free(&merged);
    MPI_Intercomm_merge(dup, low, &merged);
    MPI_Comm_rank(merged, &mrank);
    MPI_Allgather(&rank, 1, MPI_INT, order, 1, MPI_INT, merged);
    list(line, sizeof line, order, msize);
    SAY("merged (evens high): rank %d, in order %s", mrank, line);
    MPI_Comm_free(&merged);
    MPI_Intercomm_merge(inter, 0, &merged);
    MPI_Comm_rank(merged, &mrank);
    MPI_Allgather(&rank, 1, MPI_INT, order, 1, MPI_INT, merged);
    list(line, sizeof line, order, msize);
    SAY("merged (both low): rank %d, in order %s", mrank, line);
    MPI_Comm_free(&merged);

    /* Split: by local rank's parity on both sides. */
    MPI_Comm part;
    MPI_Comm_split(inter, lrank % 2, lrank, &part);
    if (part == MPI_COMM_NULL) {
        SAY("split: none");
    } else {
        int prank, psize, prsize;
        MPI_Comm_rank(part, &prank);
        MPI_Comm_size(part, &psize);
        MPI_Comm_remote_size(part, &prsize);
        remote_world(part, line, sizeof line);
        SAY("split: rank %d of %d, remote %d: %s", prank, psize, prsize, line);
        messages(part, "split");
        MPI_Comm_free(&part);
    }

    /* Create: each group without its first rank (none left: no communicator). */
    MPI_Group local, rest;
    int first = 0;
    MPI_Comm_group(inter, &local);
    MPI_Group_excl(local, 1, &first, &rest);
    MPI_Comm made;
    MPI_Comm_create(inter, rest, &made);
    if (made == MPI_COMM_NULL) {
        SAY("create: none");
    } else {
        int crank, crsize;
        MPI_Comm_rank(made, &crank);
        MPI_Comm_remote_size(made, &crsize);
        remote_world(made, line, sizeof line);
        SAY("create: rank %d, remote %d: %s", crank, crsize, line);
        int s = -1;
        MPI_Allreduce(&rank, &s, 1, MPI_INT, MPI_SUM, made);
        SAY("create: allreduce of the other side's world ranks = %d", s);
        MPI_Comm_free(&made);
    }
    MPI_Group_free(&local);
    MPI_Group_free(&rest);

    /* Errors. */
    int err, cls, x = 0;
    err = MPI_Bcast(&x, 1, MPI_INT, size, inter);
    MPI_Error_class(err, &cls);
    SAY("bcast from a rank the other group lacks: class %d (root %d)", cls, MPI_ERR_ROOT);
    err = MPI_Send(&x, 1, MPI_INT, rsize, 0, inter);
    MPI_Error_class(err, &cls);
    SAY("send to a rank the other group lacks: class %d (rank %d)", cls, MPI_ERR_RANK);
    MPI_Barrier(inter);

    MPI_Comm_free(&dup);
    MPI_Comm_free(&inter);
    MPI_Comm_free(&half);
    MPI_Finalize();
    return 0;
}
