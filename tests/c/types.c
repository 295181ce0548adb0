/* The C ABI's derived datatypes (every constructor, their bounds and envelopes), sent and
 * received by point-to-point calls (blocking, nonblocking, persistent, large enough for a
 * rendezvous), collectives and one-sided operations; MPI_Pack and MPI_Unpack; MPI_MINLOC and
 * MPI_MAXLOC on the value-index pairs; reductions of the user's (MPI_Op_create), commutative
 * or not, on predefined and derived types, blocking and nonblocking; sums and products of
 * complex numbers, reductions of long doubles; MPI_Reduce_scatter; distributed arrays
 * (MPI_Type_create_darray) and MPI_Type_match_size; portable packing (MPI_Pack_external);
 * Fortran's types as C names them; and their errors. Printed as
 * "rank: what = values" lines; the test compares them with MPICH's. */
#include <mpi.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "say.h"

/* A struct with a gap: 4 bytes of padding after `a`. */
struct pt {
    int a;
    double b;
    char c;
};

static MPI_Datatype pt_type(void)
{
    int bl[3] = {1, 1, 1};
    MPI_Aint d[3] = {offsetof(struct pt, a), offsetof(struct pt, b), offsetof(struct pt, c)};
    MPI_Datatype t[3] = {MPI_INT, MPI_DOUBLE, MPI_CHAR}, s;
    MPI_Type_create_struct(3, bl, d, t, &s);
    MPI_Type_commit(&s);
    return s;
}

static void describe(const char *name, MPI_Datatype t)
{
    int size, ni, na, nd, comb;
    MPI_Aint lb, ext, tlb, text;
    MPI_Type_size(t, &size);
    MPI_Type_get_extent(t, &lb, &ext);
    MPI_Type_get_true_extent(t, &tlb, &text);
    MPI_Type_get_envelope(t, &ni, &na, &nd, &comb);
    char line[400];
    int n = snprintf(line, sizeof line, "%s: size %d lb %ld extent %ld true %ld+%ld envelope %d %d %d %d", name, size,
                     (long)lb, (long)ext, (long)tlb, (long)text, ni, na, nd, comb);
    if (comb != MPI_COMBINER_NAMED) {
        int ints[32];
        MPI_Aint aints[8];
        MPI_Datatype types[8];
        MPI_Type_get_contents(t, 32, 8, 8, ints, aints, types);
        n += snprintf(line + n, sizeof line - n, " ints");
        for (int i = 0; i < ni && n < 360; i++)
            n += snprintf(line + n, sizeof line - n, " %d", ints[i]);
        n += snprintf(line + n, sizeof line - n, " aints");
        for (int i = 0; i < na && n < 360; i++)
            n += snprintf(line + n, sizeof line - n, " %ld", (long)aints[i]);
        n += snprintf(line + n, sizeof line - n, " types %d", nd > 0 && types[0] == MPI_INT);
        /* A derived type among them is a new handle, the caller's to free. */
        for (int i = 0; i < nd; i++) {
            int ti, ta, td, tc;
            MPI_Type_get_envelope(types[i], &ti, &ta, &td, &tc);
            if (tc != MPI_COMBINER_NAMED)
                MPI_Type_free(&types[i]);
        }
    }
    if (rank == 0)
        SAY("%s", line);
}

/* MPI_Type_get_contents gives a new handle of a derived type it was made of, which lives on
 * after the program freed its own (and another type took the freed handle); freeing the new
 * one leaves the outer type whole. */
static void contents(void)
{
    MPI_Datatype inner, outer, other, got[1];
    int ints[4];
    MPI_Aint aints[1];
    MPI_Type_vector(2, 1, 3, MPI_INT, &inner);
    MPI_Type_contiguous(2, inner, &outer);
    MPI_Type_commit(&outer);
    MPI_Type_free(&inner);
    MPI_Type_contiguous(5, MPI_DOUBLE, &other);
    MPI_Type_get_contents(outer, 4, 1, 1, ints, aints, got);
    int size, ni, na, nd, comb;
    MPI_Type_size(got[0], &size);
    MPI_Type_get_envelope(got[0], &ni, &na, &nd, &comb);
    MPI_Type_get_contents(got[0], 4, 1, 1, ints, aints, &inner);
    SAY("contents of a freed inner type: size %d vector %d ints %d %d %d %d, of int %d", size,
        comb == MPI_COMBINER_VECTOR, ni, ints[0], ints[1], ints[2], inner == MPI_INT);
    MPI_Type_free(&got[0]);
    int src[8], dst[4] = {-1, -1, -1, -1};
    for (int i = 0; i < 8; i++)
        src[i] = 10 + i;
    MPI_Sendrecv(src, 1, outer, 0, 5, dst, 4, MPI_INT, 0, 5, MPI_COMM_SELF, MPI_STATUS_IGNORE);
    SAY("outer after its parts were freed = %d %d %d %d", dst[0], dst[1], dst[2], dst[3]);
    MPI_Type_free(&outer);
    MPI_Type_free(&other);
}

static void constructors(void)
{
    MPI_Datatype t;
    MPI_Type_contiguous(3, MPI_DOUBLE, &t);
    describe("contiguous", t);
    MPI_Type_free(&t);
    SAY("freed is null = %d", t == MPI_DATATYPE_NULL);
    MPI_Type_vector(3, 2, 4, MPI_INT, &t);
    describe("vector", t);
    MPI_Type_free(&t);
    MPI_Type_create_hvector(2, 3, 40, MPI_INT, &t);
    describe("hvector", t);
    MPI_Type_free(&t);
    int bl[3] = {2, 1, 3}, di[3] = {5, 0, 9};
    MPI_Type_indexed(3, bl, di, MPI_INT, &t);
    describe("indexed", t);
    MPI_Type_free(&t);
    MPI_Aint ad[3] = {16, -8, 64};
    MPI_Type_create_hindexed(3, bl, ad, MPI_INT, &t);
    describe("hindexed", t);
    MPI_Type_free(&t);
    MPI_Type_create_indexed_block(3, 2, di, MPI_INT, &t);
    describe("indexed block", t);
    MPI_Type_free(&t);
    MPI_Type_create_hindexed_block(3, 2, ad, MPI_INT, &t);
    describe("hindexed block", t);
    MPI_Type_free(&t);
    int sizes[2] = {4, 5}, subs[2] = {2, 3}, starts[2] = {1, 1};
    MPI_Type_create_subarray(2, sizes, subs, starts, MPI_ORDER_C, MPI_INT, &t);
    describe("subarray C", t);
    MPI_Type_free(&t);
    MPI_Type_create_subarray(2, sizes, subs, starts, MPI_ORDER_FORTRAN, MPI_INT, &t);
    describe("subarray Fortran", t);
    MPI_Type_free(&t);
    MPI_Type_create_resized(MPI_INT, -4, 16, &t);
    describe("resized", t);
    MPI_Type_free(&t);
    MPI_Datatype s = pt_type();
    describe("struct", s);
    MPI_Type_dup(s, &t);
    describe("dup", t);
    MPI_Type_free(&t);
    MPI_Type_free(&s);
    describe("MPI_INT", MPI_INT);
    describe("MPI_DOUBLE_INT", MPI_DOUBLE_INT);
    describe("MPI_SHORT_INT", MPI_SHORT_INT);
    describe("MPI_2INT", MPI_2INT);
    describe("MPI_FLOAT_INT", MPI_FLOAT_INT);
    describe("MPI_LONG_INT", MPI_LONG_INT);
}

static void point_to_point(void)
{
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    /* A column of a 4x5 matrix, received whole, and into a row of another layout. */
    int m[4][5], col[4] = {0}, spread[8];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 5; j++)
            m[i][j] = rank * 100 + i * 10 + j;
    MPI_Datatype column, every_other;
    MPI_Type_vector(4, 1, 5, MPI_INT, &column);
    MPI_Type_commit(&column);
    MPI_Type_vector(4, 1, 2, MPI_INT, &every_other);
    MPI_Type_commit(&every_other);
    for (int i = 0; i < 8; i++)
        spread[i] = -1;
    MPI_Status st;
    MPI_Sendrecv(&m[0][2], 1, column, next, 1, col, 4, MPI_INT, prev, 1, MPI_COMM_WORLD, &st);
    SAY("column = %d %d %d %d", col[0], col[1], col[2], col[3]);
    MPI_Sendrecv(&m[0][3], 1, column, next, 2, spread, 1, every_other, prev, 2, MPI_COMM_WORLD, &st);
    SAY("spread = %d %d %d %d %d %d %d %d", spread[0], spread[1], spread[2], spread[3], spread[4], spread[5],
        spread[6], spread[7]);
    int count, elements;
    MPI_Get_count(&st, every_other, &count);
    MPI_Get_elements(&st, every_other, &elements);
    SAY("spread count %d elements %d", count, elements);
    /* Five ints received as pairs: two and a half. */
    int five[5] = {1, 2, 3, 4, 5}, six[6] = {0};
    MPI_Datatype pair;
    MPI_Type_contiguous(2, MPI_INT, &pair);
    MPI_Type_commit(&pair);
    MPI_Sendrecv(five, 5, MPI_INT, next, 3, six, 3, pair, prev, 3, MPI_COMM_WORLD, &st);
    MPI_Get_count(&st, pair, &count);
    MPI_Get_elements(&st, pair, &elements);
    SAY("pairs count %d elements %d last %d %d", count == MPI_UNDEFINED ? -1 : count, elements, six[4], six[5]);

    /* Structs with a gap, nonblocking, and persistent (started twice). */
    MPI_Datatype s = pt_type();
    struct pt out[3], in[3];
    memset(in, 0, sizeof in);
    for (int i = 0; i < 3; i++) {
        out[i].a = rank * 10 + i;
        out[i].b = rank + i * 0.25;
        out[i].c = (char)('a' + rank + i);
    }
    MPI_Request r[2];
    MPI_Irecv(in, 3, s, prev, 4, MPI_COMM_WORLD, &r[0]);
    MPI_Isend(out, 3, s, next, 4, MPI_COMM_WORLD, &r[1]);
    MPI_Waitall(2, r, MPI_STATUSES_IGNORE);
    for (int i = 0; i < 3; i++)
        SAY("struct %d = %d %.2f %c", i, in[i].a, in[i].b, in[i].c);
    MPI_Recv_init(in, 2, s, prev, 5, MPI_COMM_WORLD, &r[0]);
    MPI_Send_init(&out[1], 2, s, next, 5, MPI_COMM_WORLD, &r[1]);
    for (int round = 0; round < 2; round++) {
        memset(in, 0, sizeof in);
        MPI_Startall(2, r);
        MPI_Waitall(2, r, MPI_STATUSES_IGNORE);
        SAY("persistent round %d = %d %.2f %c %d", round, in[0].a, in[0].b, in[0].c, in[1].a);
        out[1].a += 1000;
    }
    MPI_Request_free(&r[0]);
    MPI_Request_free(&r[1]);

    /* A strided message large enough for a rendezvous, received strided too. */
    int n = 60000;
    int *big = (int *)malloc(sizeof(int) * 2 * n), *back = (int *)malloc(sizeof(int) * 3 * n);
    for (int i = 0; i < 2 * n; i++)
        big[i] = rank * 7 + i;
    for (int i = 0; i < 3 * n; i++)
        back[i] = -1;
    MPI_Datatype stride2, stride3;
    MPI_Type_vector(n, 1, 2, MPI_INT, &stride2);
    MPI_Type_commit(&stride2);
    MPI_Type_vector(n, 1, 3, MPI_INT, &stride3);
    MPI_Type_commit(&stride3);
    MPI_Irecv(back, 1, stride3, prev, 6, MPI_COMM_WORLD, &r[0]);
    MPI_Isend(big + 1, 1, stride2, next, 6, MPI_COMM_WORLD, &r[1]);
    MPI_Waitall(2, r, MPI_STATUSES_IGNORE);
    long sum = 0, untouched = 0;
    for (int i = 0; i < 3 * n; i++) {
        if (i % 3 == 0)
            sum += back[i];
        else
            untouched += back[i] == -1;
    }
    SAY("rendezvous sum %ld untouched %ld first %d last %d", sum, untouched, back[0], back[3 * (n - 1)]);
    /* The same, blocking and synchronous. */
    if (rank % 2 == 0 && next != rank) {
        MPI_Ssend(big, 1, stride2, next, 7, MPI_COMM_WORLD);
        MPI_Recv(back, 1, stride3, prev, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else {
        MPI_Recv(back, 1, stride3, prev, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Ssend(big, 1, stride2, next, 7, MPI_COMM_WORLD);
    }
    SAY("blocking first %d last %d", back[0], back[3 * (n - 1)]);
    free(big);
    free(back);
    MPI_Type_free(&stride2);
    MPI_Type_free(&stride3);
    MPI_Type_free(&column);
    MPI_Type_free(&every_other);
    MPI_Type_free(&pair);
    MPI_Type_free(&s);
}

static void collectives(void)
{
    /* Broadcast a 2x2 block of a 4x4 matrix. */
    int a[4][4];
    for (int i = 0; i < 16; i++)
        a[i / 4][i % 4] = rank == 0 ? i : -1;
    MPI_Datatype block;
    int sizes[2] = {4, 4}, subs[2] = {2, 2}, starts[2] = {1, 2};
    MPI_Type_create_subarray(2, sizes, subs, starts, MPI_ORDER_C, MPI_INT, &block);
    MPI_Type_commit(&block);
    MPI_Bcast(a, 1, block, 0, MPI_COMM_WORLD);
    SAY("bcast block = %d %d %d %d corner %d", a[1][2], a[1][3], a[2][2], a[2][3], a[0][0]);

    /* Gather rows into columns: a vector resized to one int's extent. */
    int row[2] = {rank * 2, rank * 2 + 1}, t[2][8];
    memset(t, 0, sizeof t);
    MPI_Datatype col, col1;
    MPI_Type_vector(2, 1, size, MPI_INT, &col);
    MPI_Type_create_resized(col, 0, sizeof(int), &col1);
    MPI_Type_commit(&col1);
    MPI_Gather(row, 2, MPI_INT, t, 1, col1, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        char line[200];
        int n = 0;
        for (int i = 0; i < 2 * size; i++)
            n += snprintf(line + n, sizeof line - n, " %d", t[i / size][i % size]);
        SAY("gather transposed =%s", line);
    }
    /* And back: scatter columns, allgather into columns. */
    int mine[2] = {0};
    MPI_Scatter(t, 1, col1, mine, 2, MPI_INT, 0, MPI_COMM_WORLD);
    SAY("scatter column = %d %d", mine[0], mine[1]);
    memset(t, 0, sizeof t);
    MPI_Allgather(row, 2, MPI_INT, t, 1, col1, MPI_COMM_WORLD);
    SAY("allgather transposed = %d %d %d %d", t[0][0], t[1][0], t[0][size - 1], t[1][size - 1]);

    /* Structs gathered with counts and displacements. */
    MPI_Datatype s = pt_type();
    struct pt me = {rank, rank * 0.5, (char)('A' + rank)}, all[8];
    memset(all, 0, sizeof all);
    int counts[8], displs[8];
    for (int i = 0; i < size; i++) {
        counts[i] = 1;
        displs[i] = size - 1 - i;
    }
    MPI_Allgatherv(&me, 1, s, all, counts, displs, s, MPI_COMM_WORLD);
    SAY("allgatherv structs = %d %.1f %c / %d %.1f %c", all[0].a, all[0].b, all[0].c, all[size - 1].a, all[size - 1].b,
        all[size - 1].c);
    /* Alltoallv of strided ints. */
    int sv[16], rv[16], sc[8], sd[8], rc[8], rd[8];
    for (int i = 0; i < 2 * size; i++)
        sv[i] = rank * 100 + i;
    MPI_Datatype two;
    MPI_Type_vector(1, 1, 1, MPI_INT, &two);
    MPI_Type_commit(&two);
    for (int i = 0; i < size; i++) {
        sc[i] = 1;
        sd[i] = 2 * i + 1;
        rc[i] = 1;
        rd[i] = i;
    }
    MPI_Alltoallv(sv, sc, sd, two, rv, rc, rd, MPI_INT, MPI_COMM_WORLD);
    SAY("alltoallv = %d %d", rv[0], rv[size - 1]);
    MPI_Type_free(&two);

    /* MINLOC and MAXLOC. */
    struct {
        double v;
        int i;
    } dv = {(rank % 2) ? -rank : rank * 1.5, rank}, dres;
    MPI_Allreduce(&dv, &dres, 1, MPI_DOUBLE_INT, MPI_MINLOC, MPI_COMM_WORLD);
    SAY("minloc double = %.1f at %d", dres.v, dres.i);
    MPI_Allreduce(&dv, &dres, 1, MPI_DOUBLE_INT, MPI_MAXLOC, MPI_COMM_WORLD);
    SAY("maxloc double = %.1f at %d", dres.v, dres.i);
    int iv[4] = {rank % 2, rank, 7, size - rank}, ires[4];
    MPI_Reduce(iv, ires, 2, MPI_2INT, MPI_MAXLOC, size - 1, MPI_COMM_WORLD);
    if (rank == size - 1)
        SAY("maxloc 2int = %d at %d, %d at %d", ires[0], ires[1], ires[2], ires[3]);
    struct {
        float v;
        int i;
    } fv = {1.0f, size - rank}, fres;
    MPI_Allreduce(&fv, &fres, 1, MPI_FLOAT_INT, MPI_MINLOC, MPI_COMM_WORLD);
    SAY("minloc ties = %.1f at %d", fres.v, fres.i);
    struct {
        short v;
        int i;
    } sv2 = {(short)(rank * 3 % 5), rank}, sres;
    MPI_Allreduce(&sv2, &sres, 1, MPI_SHORT_INT, MPI_MAXLOC, MPI_COMM_WORLD);
    SAY("maxloc short = %d at %d", sres.v, sres.i);
    MPI_Type_free(&block);
    MPI_Type_free(&col);
    MPI_Type_free(&col1);
    MPI_Type_free(&s);
}

/* Commutative: the larger magnitude. */
static void absmax(void *in, void *inout, int *len, MPI_Datatype *t)
{
    (void)t;
    int *a = (int *)in, *b = (int *)inout;
    for (int i = 0; i < *len; i++)
        if (abs(a[i]) > abs(b[i]))
            b[i] = a[i];
}

/* Not commutative: 2x2 integer matrices, b = a x b. */
static void matmul(void *in, void *inout, int *len, MPI_Datatype *t)
{
    (void)t;
    int *a = (int *)in, *b = (int *)inout;
    for (int k = 0; k < *len; k++, a += 4, b += 4) {
        int c[4] = {a[0] * b[0] + a[1] * b[2], a[0] * b[1] + a[1] * b[3], a[2] * b[0] + a[3] * b[2],
                    a[2] * b[1] + a[3] * b[3]};
        memcpy(b, c, sizeof c);
    }
}

/* On structs with a gap: sums `a`, keeps the larger `b`, the later `c`. */
static void ptop(void *in, void *inout, int *len, MPI_Datatype *t)
{
    (void)t;
    struct pt *a = (struct pt *)in, *b = (struct pt *)inout;
    for (int i = 0; i < *len; i++) {
        b[i].a += a[i].a;
        if (a[i].b > b[i].b)
            b[i].b = a[i].b;
    }
}

static void user_ops(void)
{
    MPI_Op am, mm, po;
    MPI_Op_create(absmax, 1, &am);
    MPI_Op_create(matmul, 0, &mm);
    MPI_Op_create(ptop, 1, &po);
    int commute;
    MPI_Op_commutative(mm, &commute);
    SAY("matmul commutes = %d", commute);
    int v[2] = {(rank % 2) ? -rank * 3 : rank * 2, rank - size}, r[2];
    MPI_Allreduce(v, r, 2, MPI_INT, am, MPI_COMM_WORLD);
    SAY("allreduce absmax = %d %d", r[0], r[1]);
    MPI_Reduce(v, r, 2, MPI_INT, am, 1 % size, MPI_COMM_WORLD);
    if (rank == 1 % size)
        SAY("reduce absmax = %d %d", r[0], r[1]);
    MPI_Scan(v, r, 2, MPI_INT, am, MPI_COMM_WORLD);
    SAY("scan absmax = %d %d", r[0], r[1]);
    r[0] = r[1] = 12345;
    MPI_Exscan(v, r, 2, MPI_INT, am, MPI_COMM_WORLD);
    if (rank > 0)
        SAY("exscan absmax = %d %d", r[0], r[1]);
    int loc[2] = {-100, 1};
    MPI_Reduce_local(v, loc, 2, MPI_INT, am);
    SAY("reduce local absmax = %d %d", loc[0], loc[1]);

    /* Matrices: the product in rank order. */
    MPI_Datatype mat;
    MPI_Type_contiguous(4, MPI_INT, &mat);
    MPI_Type_commit(&mat);
    int m[4] = {rank + 1, 1, 1, 0}, p[4];
    MPI_Allreduce(m, p, 1, mat, mm, MPI_COMM_WORLD);
    SAY("allreduce matmul = %d %d %d %d", p[0], p[1], p[2], p[3]);
    MPI_Scan(m, p, 1, mat, mm, MPI_COMM_WORLD);
    SAY("scan matmul = %d %d %d %d", p[0], p[1], p[2], p[3]);
    MPI_Allreduce(MPI_IN_PLACE, m, 1, mat, mm, MPI_COMM_WORLD);
    SAY("allreduce in place matmul = %d %d %d %d", m[0], m[1], m[2], m[3]);

    /* Structs with a gap. */
    MPI_Datatype s = pt_type();
    struct pt x[2] = {{rank, rank * 0.5, 'x'}, {1, -rank, 'y'}}, y[2];
    memset(y, 0, sizeof y);
    MPI_Allreduce(x, y, 2, s, po, MPI_COMM_WORLD);
    SAY("allreduce structs = %d %.1f / %d %.1f", y[0].a, y[0].b, y[1].a, y[1].b);

    /* Reduce-scatter with counts, predefined and user's operation. */
    int counts[8], send[36], got[8] = {0};
    int total = 0;
    for (int i = 0; i < size; i++) {
        counts[i] = i % 3 + 1;
        total += counts[i];
    }
    for (int i = 0; i < total; i++)
        send[i] = rank * 10 + i;
    MPI_Reduce_scatter(send, got, counts, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    SAY("reduce_scatter sum = %d %d %d", got[0], counts[rank] > 1 ? got[1] : 0, counts[rank] > 2 ? got[2] : 0);
    MPI_Reduce_scatter(MPI_IN_PLACE, send, counts, MPI_INT, am, MPI_COMM_WORLD);
    SAY("reduce_scatter in place absmax = %d", send[0]);

    /* The same operations, nonblocking, all in flight at once. */
    MPI_Request rq[8];
    int nb = 0, na[2], nr[2] = {0, 0}, mo[4], ms[4], mx[4] = {0, 0, 0, 0}, nrs[3] = {0, 0, 0}, nsend[36];
    for (int i = 0; i < total; i++)
        nsend[i] = (rank % 2 ? -1 : 1) * (rank * 10 + i);
    struct {
        double v;
        int i;
    } ndv = {(rank % 3) * 2.5, rank}, ndres;
    int mi[4] = {rank + 1, 1, 1, 0};
    MPI_Iallreduce(v, na, 2, MPI_INT, am, MPI_COMM_WORLD, &rq[nb++]);
    MPI_Ireduce(v, nr, 2, MPI_INT, am, 1 % size, MPI_COMM_WORLD, &rq[nb++]);
    MPI_Iallreduce(mi, mo, 1, mat, mm, MPI_COMM_WORLD, &rq[nb++]);
    MPI_Iscan(mi, ms, 1, mat, mm, MPI_COMM_WORLD, &rq[nb++]);
    MPI_Iexscan(mi, mx, 1, mat, mm, MPI_COMM_WORLD, &rq[nb++]);
    MPI_Iallreduce(&ndv, &ndres, 1, MPI_DOUBLE_INT, MPI_MAXLOC, MPI_COMM_WORLD, &rq[nb++]);
    MPI_Ireduce_scatter(nsend, nrs, counts, MPI_INT, am, MPI_COMM_WORLD, &rq[nb++]);
    MPI_Waitall(nb, rq, MPI_STATUSES_IGNORE);
    SAY("iallreduce absmax = %d %d", na[0], na[1]);
    if (rank == 1 % size)
        SAY("ireduce absmax = %d %d", nr[0], nr[1]);
    SAY("iallreduce matmul = %d %d %d %d", mo[0], mo[1], mo[2], mo[3]);
    SAY("iscan matmul = %d %d %d %d", ms[0], ms[1], ms[2], ms[3]);
    if (rank > 0)
        SAY("iexscan matmul = %d %d %d %d", mx[0], mx[1], mx[2], mx[3]);
    SAY("iallreduce maxloc = %.1f at %d", ndres.v, ndres.i);
    SAY("ireduce_scatter absmax = %d %d %d", nrs[0], counts[rank] > 1 ? nrs[1] : 0, counts[rank] > 2 ? nrs[2] : 0);

    /* Complex numbers (pairs of parts): sum and product, blocking and not. */
    double zc[4] = {rank + 1.0, 1.0, 0.5, -rank}, zsum[4], zprod[4];
    float fz[2] = {rank * 0.5f, 2.0f}, fzsum[2] = {0, 0};
    MPI_Allreduce(zc, zsum, 2, MPI_C_DOUBLE_COMPLEX, MPI_SUM, MPI_COMM_WORLD);
    MPI_Iallreduce(zc, zprod, 2, MPI_C_DOUBLE_COMPLEX, MPI_PROD, MPI_COMM_WORLD, &rq[0]);
    MPI_Wait(&rq[0], MPI_STATUS_IGNORE);
    MPI_Reduce(fz, fzsum, 1, MPI_C_FLOAT_COMPLEX, MPI_SUM, 0, MPI_COMM_WORLD);
    SAY("complex sum = %.1f%+.1fi %.1f%+.1fi", zsum[0], zsum[1], zsum[2], zsum[3]);
    SAY("complex prod = %.1f%+.1fi %.1f%+.1fi", zprod[0], zprod[1], zprod[2], zprod[3]);
    if (rank == 0)
        SAY("float complex sum = %.1f%+.1fi", fzsum[0], fzsum[1]);
    /* long double: C's own arithmetic. */
    long double ld[2] = {rank + 0.5L, -rank * 2.0L}, ldsum[2], ldmax[2], ldmin[2];
    MPI_Allreduce(ld, ldsum, 2, MPI_LONG_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    MPI_Iallreduce(ld, ldmax, 2, MPI_LONG_DOUBLE, MPI_MAX, MPI_COMM_WORLD, &rq[0]);
    MPI_Wait(&rq[0], MPI_STATUS_IGNORE);
    MPI_Scan(ld, ldmin, 2, MPI_LONG_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
    SAY("long double sum = %.1Lf %.1Lf, max = %.1Lf %.1Lf, scan min = %.1Lf %.1Lf", ldsum[0], ldsum[1], ldmax[0],
        ldmax[1], ldmin[0], ldmin[1]);
    /* Complex numbers of long doubles (as pairs of parts), and long double-int pairs. */
    long double lz[4] = {rank + 1.0L, 0.5L, -1.0L, rank * 1.0L}, lzsum[4], lzprod[4];
    MPI_Allreduce(lz, lzsum, 2, MPI_C_LONG_DOUBLE_COMPLEX, MPI_SUM, MPI_COMM_WORLD);
    MPI_Iallreduce(lz, lzprod, 2, MPI_C_LONG_DOUBLE_COMPLEX, MPI_PROD, MPI_COMM_WORLD, &rq[0]);
    MPI_Wait(&rq[0], MPI_STATUS_IGNORE);
    SAY("long double complex sum = %.2Lf%+.2Lfi %.2Lf%+.2Lfi, prod = %.2Lf%+.2Lfi %.2Lf%+.2Lfi", lzsum[0], lzsum[1],
        lzsum[2], lzsum[3], lzprod[0], lzprod[1], lzprod[2], lzprod[3]);
    struct {
        long double v;
        int i;
    } ldi[2] = {{1.0L + (rank % 2) * 1.0e-18L, rank}, {-(long double)rank, 10 + rank}}, ldimin[2], ldimax[2];
    /* (1 + 1e-18 is 1 as a double: only a comparison of long doubles finds the odd ranks greater.) */
    MPI_Allreduce(ldi, ldimin, 2, MPI_LONG_DOUBLE_INT, MPI_MINLOC, MPI_COMM_WORLD);
    MPI_Reduce(ldi, ldimax, 2, MPI_LONG_DOUBLE_INT, MPI_MAXLOC, size - 1, MPI_COMM_WORLD);
    SAY("long double int minloc = %Lg@%d %Lg@%d", ldimin[0].v, ldimin[0].i, ldimin[1].v, ldimin[1].i);
    if (rank == size - 1)
        SAY("long double int maxloc = %Lg@%d %Lg@%d", ldimax[0].v, ldimax[0].i, ldimax[1].v, ldimax[1].i);

    MPI_Op_free(&am);
    SAY("op freed is null = %d", am == MPI_OP_NULL);
    MPI_Op_free(&mm);
    MPI_Op_free(&po);
    MPI_Type_free(&mat);
    MPI_Type_free(&s);
}

static void one_sided(void)
{
    int *base;
    MPI_Win win;
    MPI_Win_allocate(20 * sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
    for (int i = 0; i < 20; i++)
        base[i] = -1;
    int next = (rank + 1) % size, vals[5], strided[10];
    for (int i = 0; i < 5; i++)
        vals[i] = rank * 10 + i;
    for (int i = 0; i < 10; i++)
        strided[i] = -2;
    MPI_Datatype every_other, three;
    MPI_Type_vector(5, 1, 2, MPI_INT, &every_other);
    MPI_Type_commit(&every_other);
    int bl[2] = {1, 2}, di[2] = {12, 16};
    MPI_Type_indexed(2, bl, di, MPI_INT, &three);
    MPI_Type_commit(&three);
    MPI_Win_fence(0, win);
    MPI_Put(vals, 5, MPI_INT, next, 1, 1, every_other, win);
    MPI_Win_fence(0, win);
    SAY("put strided = %d %d %d %d %d %d", base[0], base[1], base[2], base[3], base[9], base[10]);
    MPI_Get(strided, 1, every_other, next, 1, 5, MPI_INT, win);
    int acc[3] = {1, 2, 3};
    MPI_Accumulate(acc, 3, MPI_INT, next, 0, 1, three, MPI_SUM, win);
    MPI_Win_fence(0, win);
    SAY("get strided = %d %d %d %d", strided[0], strided[1], strided[2], strided[8]);
    SAY("accumulate indexed = %d %d %d %d", base[12], base[13], base[16], base[17]);
    MPI_Win_free(&win);
    MPI_Type_free(&every_other);
    MPI_Type_free(&three);
}

static void packing(void)
{
    char buf[256];
    int pos = 0, one = rank + 40, m[3][3], col[3], size_needed;
    double d = rank * 2.5;
    for (int i = 0; i < 9; i++)
        m[i / 3][i % 3] = rank * 9 + i;
    MPI_Datatype column;
    MPI_Type_vector(3, 1, 3, MPI_INT, &column);
    MPI_Type_commit(&column);
    MPI_Pack_size(1, column, MPI_COMM_WORLD, &size_needed);
    SAY("pack size column = %d", size_needed);
    MPI_Pack(&one, 1, MPI_INT, buf, sizeof buf, &pos, MPI_COMM_WORLD);
    MPI_Pack(&m[0][1], 1, column, buf, sizeof buf, &pos, MPI_COMM_WORLD);
    MPI_Pack(&d, 1, MPI_DOUBLE, buf, sizeof buf, &pos, MPI_COMM_WORLD);
    SAY("packed = %d bytes", pos);
    char in[256];
    MPI_Status st;
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    MPI_Sendrecv(buf, pos, MPI_PACKED, next, 8, in, sizeof in, MPI_PACKED, prev, 8, MPI_COMM_WORLD, &st);
    int got, n;
    MPI_Get_count(&st, MPI_PACKED, &n);
    pos = 0;
    int one_back;
    double d_back;
    MPI_Unpack(in, n, &pos, &one_back, 1, MPI_INT, MPI_COMM_WORLD);
    MPI_Unpack(in, n, &pos, col, 3, MPI_INT, MPI_COMM_WORLD);
    MPI_Unpack(in, n, &pos, &d_back, 1, MPI_DOUBLE, MPI_COMM_WORLD);
    got = pos;
    SAY("unpacked = %d [%d %d %d] %.1f at %d", one_back, col[0], col[1], col[2], d_back, got);
    MPI_Type_free(&column);
}

/* The bytes of a buffer as hex, into text. */
static void hex(char *text, const unsigned char *b, MPI_Aint n)
{
    for (MPI_Aint i = 0; i < n; i++)
        sprintf(text + 2 * i, "%02x", b[i]);
    text[2 * n] = 0;
}

/* MPI's portable packing (external32: big-endian, of fixed sizes; a long in 4 bytes, a long
 * double in 16 as IEEE quadruple precision), each predefined type and a vector's columns,
 * read back; and the elements of a message that ends inside a struct (MPI_Get_elements). */
static void externals(void)
{
    unsigned char buf[256];
    char text[600];
    MPI_Aint pos = 0, need = -1;
    int ints[3] = {1, -2 - rank, 0x01020304};
    short shorts[2] = {-3, 0x0102};
    long longs[2] = {-5, 1L << 30};
    unsigned long ulongs[1] = {4000000000UL};
    float floats[2] = {1.5f, -0.25f};
    double doubles[2] = {2.5 + rank, -1e300};
    long double lds[2] = {1.5L, -3.25L + rank};
    float fc[2] = {0.5f, -8.0f};
    signed char chars[3] = {'a', -1, 'z'};
    long long lls[1] = {-(1LL << 40)};
    struct {
        const char *name;
        void *data;
        int count;
        MPI_Datatype type;
    } cases[] = {
        {"int", ints, 3, MPI_INT},
        {"short", shorts, 2, MPI_SHORT},
        {"long", longs, 2, MPI_LONG},
        {"unsigned long", ulongs, 1, MPI_UNSIGNED_LONG},
        {"float", floats, 2, MPI_FLOAT},
        {"double", doubles, 2, MPI_DOUBLE},
        {"long double", lds, 2, MPI_LONG_DOUBLE},
        {"float complex", fc, 1, MPI_C_FLOAT_COMPLEX},
        {"signed char", chars, 3, MPI_SIGNED_CHAR},
        {"long long", lls, 1, MPI_LONG_LONG},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        unsigned char back[64];
        memset(back, 0, sizeof back);
        MPI_Pack_external_size("external32", cases[i].count, cases[i].type, &need);
        pos = 0;
        MPI_Pack_external("external32", cases[i].data, cases[i].count, cases[i].type, buf, sizeof buf, &pos);
        hex(text, buf, pos);
        MPI_Aint at = 0;
        MPI_Unpack_external("external32", buf, pos, &at, back, cases[i].count, cases[i].type);
        int size, same;
        MPI_Type_size(cases[i].type, &size);
        if (cases[i].type == MPI_LONG_DOUBLE) {
            /* (by value: a long double's padding bytes are not its data) */
            long double got[2];
            memcpy(got, back, sizeof got);
            same = got[0] == lds[0] && got[1] == lds[1];
        } else {
            same = memcmp(back, cases[i].data, (size_t)size * cases[i].count) == 0;
        }
        SAY("external32 %s: size %ld, packed %ld: %s; back %s at %ld", cases[i].name, (long)need, (long)pos, text,
            same ? "the same" : "DIFFERENT", (long)at);
    }
    /* C's bool. */
    unsigned char bools[2] = {1, 0}, bools_back[2] = {9, 9};
    pos = 0;
    MPI_Pack_external("external32", bools, 2, MPI_C_BOOL, buf, sizeof buf, &pos);
    hex(text, buf, pos);
    MPI_Aint at_bool = 0;
    MPI_Unpack_external("external32", buf, pos, &at_bool, bools_back, 2, MPI_C_BOOL);
    SAY("external32 bool: %s; back %d %d", text, bools_back[0], bools_back[1]);
    /* A matrix's middle column, after an int, in one buffer; unpacked into a row's place. */
    int m[3][3], row[3] = {0, 0, 0}, first = -1;
    for (int i = 0; i < 9; i++)
        m[i / 3][i % 3] = rank * 100 + i;
    MPI_Datatype column;
    MPI_Type_vector(3, 1, 3, MPI_INT, &column);
    MPI_Type_commit(&column);
    pos = 0;
    MPI_Pack_external("external32", &ints[2], 1, MPI_INT, buf, sizeof buf, &pos);
    MPI_Pack_external("external32", &m[0][1], 1, column, buf, sizeof buf, &pos);
    hex(text, buf, pos);
    MPI_Aint at = 0;
    MPI_Unpack_external("external32", buf, pos, &at, &first, 1, MPI_INT);
    MPI_Unpack_external("external32", buf, pos, &at, row, 3, MPI_INT);
    SAY("external32 column: %s; back %x [%d %d %d] at %ld", text, first, row[0], row[1], row[2], (long)at);
    MPI_Type_free(&column);
    /* A struct of an int and 16 chars received from fewer bytes: its basic elements. */
    MPI_Datatype rec, olds[2] = {MPI_INT, MPI_CHAR};
    int lens[2] = {1, 16};
    MPI_Aint disps[2] = {0, sizeof(int)};
    MPI_Type_create_struct(2, lens, disps, olds, &rec);
    MPI_Type_commit(&rec);
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    int sends[4] = {6, 4, 9, 24};
    for (int i = 0; i < 4; i++) {
        char out[48], in[48];
        MPI_Status st;
        int elements = -2, count = -2;
        memset(out, 7, sizeof out);
        MPI_Sendrecv(out, sends[i], MPI_BYTE, next, 30, in, 2, rec, prev, 30, MPI_COMM_WORLD, &st);
        MPI_Get_elements(&st, rec, &elements);
        MPI_Get_count(&st, rec, &count);
        SAY("struct received from %d bytes: %d elements, count %d", sends[i], elements, count);
    }
    MPI_Type_free(&rec);
}

/* Fortran's and C++'s types as a C program names them: their names, sizes and envelopes
 * (C's complex beside them, whose name is MPI_C_COMPLEX); INTEGER,
 * REAL, DOUBLE PRECISION and their sized kinds sent, summed and accumulated; LOGICAL's
 * logical operations; sums and products of COMPLEX and DOUBLE COMPLEX; MPI_MINLOC on
 * MPI_2INTEGER; C++'s bool and complex reduced; the external32 bytes of INTEGER, DOUBLE PRECISION and LOGICAL (COMPLEX's
 * are checked by a unit test: MPICH swaps its halves); and a sum of LOGICALs refused. */
static void fortran_types(void)
{
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Datatype named[] = {MPI_CHARACTER, MPI_LOGICAL, MPI_INTEGER, MPI_REAL, MPI_DOUBLE_PRECISION,
                            MPI_INTEGER1, MPI_INTEGER2, MPI_INTEGER4, MPI_INTEGER8, MPI_REAL4,
                            MPI_REAL8, MPI_COMPLEX, MPI_DOUBLE_COMPLEX, MPI_COMPLEX8, MPI_COMPLEX16,
                            MPI_2INTEGER, MPI_CXX_BOOL, MPI_CXX_FLOAT_COMPLEX, MPI_CXX_DOUBLE_COMPLEX,
                            MPI_CXX_LONG_DOUBLE_COMPLEX, MPI_C_COMPLEX, MPI_C_FLOAT_COMPLEX};
    for (size_t i = 0; i < sizeof named / sizeof named[0]; i++) {
        char name[MPI_MAX_OBJECT_NAME];
        int len, tsize, ni, na, nd, comb;
        MPI_Aint lb, ext;
        MPI_Type_get_name(named[i], name, &len);
        MPI_Type_size(named[i], &tsize);
        MPI_Type_get_extent(named[i], &lb, &ext);
        MPI_Type_get_envelope(named[i], &ni, &na, &nd, &comb);
        SAY("named %zu %s: size %d, extent %ld, named %d", i, name, tsize, (long)ext, comb == MPI_COMBINER_NAMED);
    }
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    /* Sent and received as themselves. */
    int integers[3] = {rank, -rank - 1, 1 << 20}, in_int[3];
    double dp[2] = {0.5 + rank, -1e-3}, in_dp[2];
    long long i8[2] = {(long long)rank << 40, -7}, in_i8[2];
    MPI_Sendrecv(integers, 3, MPI_INTEGER, next, 40, in_int, 3, MPI_INTEGER, prev, 40, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
    MPI_Sendrecv(dp, 2, MPI_DOUBLE_PRECISION, next, 41, in_dp, 2, MPI_DOUBLE_PRECISION, prev, 41, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
    MPI_Sendrecv(i8, 2, MPI_INTEGER8, next, 42, in_i8, 2, MPI_INTEGER8, prev, 42, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
    SAY("fortran received %d %d %d, %g %g, %lld %lld", in_int[0], in_int[1], in_int[2], in_dp[0], in_dp[1],
        in_i8[0], in_i8[1]);
    /* Reductions. */
    int isum[3];
    float reals[2] = {1.5f * rank, -2.0f}, rmax[2];
    double dsum[2];
    short i2[2] = {(short)(rank + 1), (short)-rank}, i2prod[2];
    MPI_Allreduce(integers, isum, 3, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(reals, rmax, 2, MPI_REAL, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(dp, dsum, 2, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(i2, i2prod, 2, MPI_INTEGER2, MPI_PROD, MPI_COMM_WORLD);
    SAY("fortran sum %d %d %d, max %g %g, sum %g %g, prod %d %d", isum[0], isum[1], isum[2], rmax[0], rmax[1],
        dsum[0], dsum[1], i2prod[0], i2prod[1]);
    int logicals[3] = {1, rank % 2, 0}, land[3], lor[3], lxor[3];
    MPI_Allreduce(logicals, land, 3, MPI_LOGICAL, MPI_LAND, MPI_COMM_WORLD);
    MPI_Allreduce(logicals, lor, 3, MPI_LOGICAL, MPI_LOR, MPI_COMM_WORLD);
    MPI_Allreduce(logicals, lxor, 3, MPI_LOGICAL, MPI_LXOR, MPI_COMM_WORLD);
    SAY("fortran logical and %d %d %d, or %d %d %d, xor %d %d %d", land[0], land[1], land[2], lor[0], lor[1], lor[2],
        lxor[0], lxor[1], lxor[2]);
    float cx[4] = {1.0f + rank, 0.5f, -1.0f, (float)rank}, cxsum[4];
    double dcx[2] = {1.0, 1.0 + rank}, dcxprod[2];
    MPI_Allreduce(cx, cxsum, 2, MPI_COMPLEX, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(dcx, dcxprod, 1, MPI_DOUBLE_COMPLEX, MPI_PROD, MPI_COMM_WORLD);
    SAY("fortran complex sum (%g,%g) (%g,%g), double complex product (%g,%g)", cxsum[0], cxsum[1], cxsum[2],
        cxsum[3], dcxprod[0], dcxprod[1]);
    int pairs[4] = {10 - rank % 3, rank, rank * 2, rank}, minloc[4];
    MPI_Allreduce(pairs, minloc, 2, MPI_2INTEGER, MPI_MINLOC, MPI_COMM_WORLD);
    SAY("fortran minloc (%d at %d) (%d at %d)", minloc[0], minloc[1], minloc[2], minloc[3]);
    /* C++'s types. */
    unsigned char cxx_bools[2] = {(unsigned char)(rank == 1), 1}, cxx_or[2];
    double cxx_cx[2] = {1.0 + rank, -0.5}, cxx_sum[2];
    MPI_Allreduce(cxx_bools, cxx_or, 2, MPI_CXX_BOOL, MPI_LOR, MPI_COMM_WORLD);
    MPI_Allreduce(cxx_cx, cxx_sum, 1, MPI_CXX_DOUBLE_COMPLEX, MPI_SUM, MPI_COMM_WORLD);
    SAY("c++ bool or %d %d, double complex sum (%g,%g)", cxx_or[0], cxx_or[1], cxx_sum[0], cxx_sum[1]);
    /* An accumulate of INTEGER4s into a window. */
    int cells[2] = {0, 0}, one[2] = {1, rank};
    MPI_Win win;
    MPI_Win_create(cells, sizeof cells, sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &win);
    MPI_Win_fence(0, win);
    MPI_Accumulate(one, 2, MPI_INTEGER4, 0, 0, 2, MPI_INTEGER4, MPI_SUM, win);
    MPI_Win_fence(0, win);
    MPI_Win_free(&win);
    if (rank == 0)
        SAY("fortran accumulated %d %d", cells[0], cells[1]);
    /* external32. */
    unsigned char buf[64];
    char text[200];
    MPI_Aint pos = 0;
    MPI_Pack_external("external32", integers, 2, MPI_INTEGER, buf, sizeof buf, &pos);
    MPI_Pack_external("external32", dp, 1, MPI_DOUBLE_PRECISION, buf, sizeof buf, &pos);
    MPI_Pack_external("external32", logicals, 2, MPI_LOGICAL, buf, sizeof buf, &pos);
    hex(text, buf, pos);
    SAY("fortran external32 %s", text);
    /* Refused: arithmetic on LOGICAL (CHARACTER's refusal is in refusals.c: MPICH takes it). */
    int cls, rc;
    rc = MPI_Allreduce(logicals, land, 1, MPI_LOGICAL, MPI_SUM, MPI_COMM_WORLD);
    MPI_Error_class(rc, &cls);
    SAY("fortran sum of logicals = %d", cls);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
}

static void errors(void)
{
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int v[4] = {0}, cls, rc;
    MPI_Datatype t = MPI_INT;
    MPI_Datatype raw;
    MPI_Type_contiguous(2, MPI_INT, &raw);
    rc = MPI_Send(v, 1, raw, (rank + 1) % size, 9, MPI_COMM_WORLD);
    MPI_Error_class(rc, &cls);
    SAY("send uncommitted = %d", cls);
    MPI_Type_free(&raw);
    rc = MPI_Type_free(&t);
    MPI_Error_class(rc, &cls);
    SAY("free predefined = %d", cls);
    rc = MPI_Type_contiguous(-1, MPI_INT, &raw);
    MPI_Error_class(rc, &cls);
    SAY("negative count = %d", cls);
    rc = MPI_Type_vector(2, 1, 1, 999, &raw);
    MPI_Error_class(rc, &cls);
    SAY("bad old type = %d", cls);
    rc = MPI_Allreduce(v, v + 2, 1, MPI_INT, MPI_MINLOC, MPI_COMM_WORLD);
    MPI_Error_class(rc, &cls);
    SAY("minloc on int = %d", cls);
    double z[4] = {1, 2, 3, 4};
    rc = MPI_Allreduce(z, z + 2, 1, MPI_C_DOUBLE_COMPLEX, MPI_MAX, MPI_COMM_WORLD);
    MPI_Error_class(rc, &cls);
    SAY("max of complex = %d", cls);
    MPI_Op sum = MPI_SUM;
    rc = MPI_Op_free(&sum);
    MPI_Error_class(rc, &cls);
    SAY("free MPI_SUM = %d", cls);
    MPI_Aint need;
    int cls2;
    MPI_Error_class(MPI_Pack_external_size("external32", -1, MPI_INT, &need), &cls);
    MPI_Error_class(MPI_Pack_external_size("external32", 1, 999, &need), &cls2);
    SAY("external32 size of a negative count = %d, of datatype 999 = %d", cls, cls2);
}

/* Distributed arrays (MPI_Type_create_darray): each part of a numbered array, described and
 * packed, for every process of the grid; each rank's part of a 2x2 grid sent to it from rank 0
 * as that type and received as plain ints; and MPI_Type_match_size. */
static void darrays(void)
{
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int all[128], got[128];
    for (int i = 0; i < 128; i++)
        all[i] = i;
    /* A 4x6 array over a 2x2 grid: rows in blocks, columns in cycles of 2. */
    int g[2] = {4, 6}, dist[2] = {MPI_DISTRIBUTE_BLOCK, MPI_DISTRIBUTE_CYCLIC};
    int darg[2] = {MPI_DISTRIBUTE_DFLT_DARG, 2}, ps[2] = {2, 2};
    /* A 5x7x3 array over 2x3x1: cycles of 1, blocks of 3, the last undistributed. */
    int g3[3] = {5, 7, 3}, dist3[3] = {MPI_DISTRIBUTE_CYCLIC, MPI_DISTRIBUTE_BLOCK, MPI_DISTRIBUTE_NONE};
    int darg3[3] = {MPI_DISTRIBUTE_DFLT_DARG, 3, MPI_DISTRIBUTE_DFLT_DARG}, ps3[3] = {2, 3, 1};
    char name[64], line[600];
    MPI_Datatype t;
    for (int k = 0; k < 3; k++) {
        int three = k == 2, procs = three ? 6 : 4;
        int order = k == 1 ? MPI_ORDER_FORTRAN : MPI_ORDER_C;
        for (int r = 0; r < procs; r++) {
            if (three)
                MPI_Type_create_darray(procs, r, 3, g3, dist3, darg3, ps3, order, MPI_INT, &t);
            else
                MPI_Type_create_darray(procs, r, 2, g, dist, darg, ps, order, MPI_INT, &t);
            MPI_Type_commit(&t);
            snprintf(name, sizeof name, "darray %s %s rank %d", three ? "3d" : "2d",
                     order == MPI_ORDER_C ? "C" : "Fortran", r);
            describe(name, t);
            int pos = 0, used = 0;
            MPI_Pack(all, 1, t, got, (int)sizeof got, &pos, MPI_COMM_SELF);
            for (int i = 0; i < pos / (int)sizeof(int) && used < 560; i++)
                used += snprintf(line + used, sizeof line - used, " %d", got[i]);
            if (rank == 0)
                SAY("%s holds%s", name, pos ? line : " nothing");
            MPI_Type_free(&t);
        }
    }
    /* Each rank's part of the 2x2 grid's array, from rank 0. */
    if (rank < 4) {
        MPI_Type_create_darray(4, rank, 2, g, dist, darg, ps, MPI_ORDER_C, MPI_INT, &t);
        MPI_Type_commit(&t);
        int n;
        MPI_Type_size(t, &n);
        MPI_Type_free(&t);
        MPI_Request q = MPI_REQUEST_NULL;
        for (int i = 0; i < 128; i++)
            got[i] = -1;
        MPI_Irecv(got, n / (int)sizeof(int), MPI_INT, 0, 40, MPI_COMM_WORLD, &q);
        if (rank == 0) {
            for (int r = 0; r < size && r < 4; r++) {
                MPI_Type_create_darray(4, r, 2, g, dist, darg, ps, MPI_ORDER_C, MPI_INT, &t);
                MPI_Type_commit(&t);
                MPI_Send(all, 1, t, r, 40, MPI_COMM_WORLD);
                MPI_Type_free(&t);
            }
        }
        MPI_Wait(&q, MPI_STATUS_IGNORE);
        int used = 0;
        for (int i = 0; i < n / (int)sizeof(int); i++)
            used += snprintf(line + used, sizeof line - used, " %d", got[i]);
        SAY("darray part received:%s", line);
    }
    /* Errors: blocks that leave part of a dimension, a cyclic block of 0 (refusals.c has the
     * ones MPICH lets through). */
    int bad[2] = {1, MPI_DISTRIBUTE_DFLT_DARG}, zero[2] = {0, 0}, cls[2];
    int cyc[2] = {MPI_DISTRIBUTE_CYCLIC, MPI_DISTRIBUTE_CYCLIC};
    t = MPI_DATATYPE_NULL;
    MPI_Error_class(MPI_Type_create_darray(4, 0, 2, g, dist, bad, ps, MPI_ORDER_C, MPI_INT, &t), &cls[0]);
    MPI_Error_class(MPI_Type_create_darray(4, 0, 2, g, cyc, zero, ps, MPI_ORDER_C, MPI_INT, &t), &cls[1]);
    SAY("darray errors: classes %d %d, null %d", cls[0], cls[1], t == MPI_DATATYPE_NULL);

    /* MPI_Type_match_size: the type each class and size finds, its name and size. */
    int classes[3] = {MPI_TYPECLASS_REAL, MPI_TYPECLASS_INTEGER, MPI_TYPECLASS_COMPLEX};
    int sizes[3][4] = {{4, 8, 0, 0}, {1, 2, 4, 8}, {8, 16, 0, 0}};
    for (int c = 0; c < 3; c++)
        for (int i = 0; i < 4 && sizes[c][i]; i++) {
            MPI_Datatype m = MPI_DATATYPE_NULL;
            int n = -1, len;
            char name[MPI_MAX_OBJECT_NAME] = "";
            MPI_Type_match_size(classes[c], sizes[c][i], &m);
            MPI_Type_size(m, &n);
            MPI_Type_get_name(m, name, &len);
            SAY("match_size class %d size %d: %s, a type of %d bytes", classes[c], sizes[c][i], name, n);
        }
    MPI_Datatype m = MPI_DATATYPE_NULL;
    MPI_Error_class(MPI_Type_match_size(MPI_TYPECLASS_REAL, 3, &m), &cls[0]);
    MPI_Error_class(MPI_Type_match_size(99, 4, &m), &cls[1]);
    SAY("match_size errors: classes %d %d, null %d", cls[0], cls[1], m == MPI_DATATYPE_NULL);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    constructors();
    contents();
    point_to_point();
    collectives();
    user_ops();
    one_sided();
    packing();
    externals();
    fortran_types();
    errors();
    darrays();
    MPI_Finalize();
    return 0;
}
