/* MPI-1's names, as programs written for MPI-1 call them: attributes by MPI_Keyval_create /
 * MPI_Attr_put / MPI_Attr_get / MPI_Attr_delete (MPI_DUP_FN, MPI_NULL_COPY_FN, a delete
 * function of the program's), a panel of separate buffers described by MPI_Address and
 * MPI_Type_struct and sent from MPI_BOTTOM (as HPL 2.x does), MPI_Type_hvector and
 * MPI_Type_hindexed, MPI_Type_extent / lb / ub, the error handlers of MPI_Errhandler_create /
 * set / get; and their errors. Printed as "rank: what = values" lines; the test compares them
 * with MPICH's. */
#include <mpi.h>
#include <stdlib.h>

#include "say.h"

static int deleted;

static int count_delete(MPI_Comm comm, int keyval, void *value, void *extra)
{
    (void)comm;
    (void)keyval;
    deleted += *(int *)value + *(int *)extra;
    return MPI_SUCCESS;
}

static void attributes(void)
{
    static int extra = 100, value = 7, other = 9;
    int dup_key, null_key, flag = -1;
    MPI_Keyval_create(MPI_DUP_FN, count_delete, &dup_key, &extra);
    MPI_Keyval_create(MPI_NULL_COPY_FN, MPI_NULL_DELETE_FN, &null_key, NULL);
    MPI_Attr_put(MPI_COMM_WORLD, dup_key, &value);
    MPI_Attr_put(MPI_COMM_WORLD, null_key, &other);
    int *got = NULL;
    MPI_Attr_get(MPI_COMM_WORLD, dup_key, &got, &flag);
    SAY("attr get = %d %d", flag, flag ? *got : -1);

    /* A duplicate keeps what MPI_DUP_FN copies, not what MPI_NULL_COPY_FN drops. */
    MPI_Comm dup;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    got = NULL;
    MPI_Attr_get(dup, dup_key, &got, &flag);
    SAY("dup copied = %d %d", flag, flag ? *got : -1);
    MPI_Attr_get(dup, null_key, &got, &flag);
    SAY("dup dropped = %d", flag);

    /* Deleting runs the delete function: on the duplicate when it is freed, on the world's
     * value by MPI_Attr_delete. */
    MPI_Comm_free(&dup);
    SAY("deleted by free = %d", deleted);
    MPI_Attr_delete(MPI_COMM_WORLD, dup_key);
    MPI_Attr_get(MPI_COMM_WORLD, dup_key, &got, &flag);
    SAY("deleted by delete = %d flag %d", deleted, flag);
    MPI_Attr_delete(MPI_COMM_WORLD, null_key);
    MPI_Keyval_free(&dup_key);
    MPI_Keyval_free(&null_key);
    SAY("keys freed = %d %d", dup_key == MPI_KEYVAL_INVALID, null_key == MPI_KEYVAL_INVALID);

    /* The predefined attributes, by the old call. */
    int *tag_ub = NULL;
    MPI_Attr_get(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &flag);
    SAY("tag ub = %d %d", flag, flag && *tag_ub >= 32767);
}

/* HPL's way: a panel's parts in buffers of their own, one struct type of their absolute
 * addresses, sent from and received at MPI_BOTTOM. */
static void panel(void)
{
    enum { NA = 6, NB = 3, NC = 4 };
    double *a = (double *)malloc(NA * sizeof *a), *b = (double *)malloc(NB * sizeof *b);
    int *c = (int *)malloc(NC * sizeof *c);
    int peer = (rank + 1) % size, from = (rank + size - 1) % size;
    for (int i = 0; i < NA; i++)
        a[i] = rank * 100 + i;
    for (int i = 0; i < NB; i++)
        b[i] = rank * 100 + 50 + i;
    for (int i = 0; i < NC; i++)
        c[i] = rank * 1000 + i;
    int bl[3] = {NA, NB, NC};
    MPI_Aint d[3];
    MPI_Datatype t[3] = {MPI_DOUBLE, MPI_DOUBLE, MPI_INT}, out;
    MPI_Address(a, &d[0]);
    MPI_Address(b, &d[1]);
    MPI_Address(c, &d[2]);
    MPI_Type_struct(3, bl, d, t, &out);
    MPI_Type_commit(&out);
    int tsize;
    MPI_Type_size(out, &tsize);
    SAY("panel size = %d", tsize);

    double *ra = (double *)calloc(NA, sizeof *ra), *rb = (double *)calloc(NB, sizeof *rb);
    int *rc = (int *)calloc(NC, sizeof *rc);
    MPI_Aint rd[3];
    MPI_Datatype in;
    MPI_Address(ra, &rd[0]);
    MPI_Address(rb, &rd[1]);
    MPI_Address(rc, &rd[2]);
    MPI_Type_struct(3, bl, rd, t, &in);
    MPI_Type_commit(&in);
    MPI_Sendrecv(MPI_BOTTOM, 1, out, peer, 5, MPI_BOTTOM, 1, in, from, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    SAY("panel = %g %g %g %g %d %d", ra[0], ra[NA - 1], rb[0], rb[NB - 1], rc[0], rc[NC - 1]);

    /* The same panel broadcast from rank 1, as HPL's row broadcast. */
    MPI_Bcast(MPI_BOTTOM, 1, rank == 1 ? out : in, 1, MPI_COMM_WORLD);
    if (rank != 1)
        SAY("panel bcast = %g %g %d", ra[1], rb[2], rc[3]);
    MPI_Type_free(&out);
    MPI_Type_free(&in);
    free(a);
    free(b);
    free(c);
    free(ra);
    free(rb);
    free(rc);
}

static void constructors(void)
{
    /* Every other int of a row, rows 40 bytes apart: 3 rows of 2 blocks of 1. */
    MPI_Datatype every_other, rows, picked, wide;
    MPI_Type_vector(2, 1, 2, MPI_INT, &every_other);
    MPI_Type_hvector(3, 1, 40, every_other, &rows);
    MPI_Type_commit(&rows);
    MPI_Aint lb, ub, extent;
    MPI_Type_extent(rows, &extent);
    MPI_Type_lb(rows, &lb);
    MPI_Type_ub(rows, &ub);
    int ni, na, nd, comb;
    MPI_Type_get_envelope(rows, &ni, &na, &nd, &comb);
    SAY("hvector = extent %ld lb %ld ub %ld, envelope %d %d %d %d", (long)extent, (long)lb, (long)ub, ni, na, nd,
        comb == MPI_COMBINER_HVECTOR);

    int blocks[3] = {2, 1, 3};
    MPI_Aint at[3] = {4, 20, 36};
    MPI_Type_hindexed(3, blocks, at, MPI_INT, &picked);
    MPI_Type_commit(&picked);
    MPI_Type_extent(picked, &extent);
    MPI_Type_lb(picked, &lb);
    MPI_Type_ub(picked, &ub);
    MPI_Type_get_envelope(picked, &ni, &na, &nd, &comb);
    SAY("hindexed = extent %ld lb %ld ub %ld, envelope %d %d %d %d", (long)extent, (long)lb, (long)ub, ni, na, nd,
        comb == MPI_COMBINER_HINDEXED);

    /* Sent through the old types and landed as plain ints. */
    int src[30], dst[12] = {0};
    for (int i = 0; i < 30; i++)
        src[i] = rank * 100 + i;
    MPI_Sendrecv(src, 1, rows, (rank + 1) % size, 6, dst, 6, MPI_INT, (rank + size - 1) % size, 6, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
    SAY("hvector data = %d %d %d %d %d %d", dst[0], dst[1], dst[2], dst[3], dst[4], dst[5]);
    MPI_Sendrecv(src, 1, picked, (rank + 1) % size, 7, dst, 6, MPI_INT, (rank + size - 1) % size, 7, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
    SAY("hindexed data = %d %d %d %d %d %d", dst[0], dst[1], dst[2], dst[3], dst[4], dst[5]);

    /* The bounds of a resized type, and of a predefined one. */
    MPI_Type_create_resized(MPI_INT, -8, 32, &wide);
    MPI_Type_extent(wide, &extent);
    MPI_Type_lb(wide, &lb);
    MPI_Type_ub(wide, &ub);
    SAY("resized = extent %ld lb %ld ub %ld", (long)extent, (long)lb, (long)ub);
    MPI_Type_extent(MPI_DOUBLE, &extent);
    MPI_Type_ub(MPI_DOUBLE, &ub);
    SAY("double = extent %ld ub %ld", (long)extent, (long)ub);
    MPI_Type_free(&every_other);
    MPI_Type_free(&rows);
    MPI_Type_free(&picked);
    MPI_Type_free(&wide);
}

static int handled, handled_class;

static void on_error(MPI_Comm *comm, int *code, ...)
{
    (void)comm;
    handled++;
    MPI_Error_class(*code, &handled_class);
}

static void handlers(void)
{
    MPI_Comm c;
    MPI_Comm_dup(MPI_COMM_WORLD, &c);
    MPI_Errhandler h, got;
    MPI_Errhandler_create(on_error, &h);
    MPI_Errhandler_set(c, h);
    MPI_Errhandler_get(c, &got);
    SAY("handler got = %d", got == h);
    int one = 1;
    int rc = MPI_Send(&one, 1, MPI_INT, size, 0, c);
    SAY("handler called = %d class %d (rank %d) returned %d", handled, handled_class, MPI_ERR_RANK, rc != MPI_SUCCESS);
    MPI_Errhandler_free(&got);
    MPI_Errhandler_free(&h);

    /* The old calls' own errors, returned (a datatype's go to the world's handler). */
    MPI_Errhandler_set(c, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Aint x;
    int cls;
    MPI_Error_class(MPI_Type_extent(MPI_DATATYPE_NULL, &x), &cls);
    SAY("extent of null = class %d", cls);
    int bl = 1;
    MPI_Aint d = 0;
    MPI_Datatype t = MPI_INT, made;
    MPI_Error_class(MPI_Type_struct(-1, &bl, &d, &t, &made), &cls);
    SAY("struct of -1 = class %d", cls);
    MPI_Error_class(MPI_Type_hvector(2, 1, 8, MPI_DATATYPE_NULL, &made), &cls);
    SAY("hvector of null = class %d", cls);
    int *v, flag;
    MPI_Error_class(MPI_Attr_get(MPI_COMM_NULL, MPI_TAG_UB, &v, &flag), &cls);
    SAY("attr of null comm = class %d", cls);
    MPI_Error_class(MPI_Errhandler_set(MPI_COMM_NULL, MPI_ERRORS_RETURN), &cls);
    SAY("handler of null comm = class %d", cls);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    MPI_Comm_free(&c);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    attributes();
    panel();
    constructors();
    handlers();
    MPI_Finalize();
    return 0;
}
