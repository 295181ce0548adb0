/* Attributes of datatypes and windows (MPI_Type_create_keyval ... MPI_Win_delete_attr, with
 * MPI_TYPE_DUP_FN and delete functions of the program's), error classes, codes and strings the
 * program adds (MPI_Add_error_class / code / string, MPI_LASTUSEDCODE), address arithmetic
 * (MPI_Aint_add, MPI_Aint_diff), MPI_Comm_test_inter and MPI_Comm_get_parent, and their errors.
 * Printed as "rank: what = values" lines; the test compares them with MPICH's. */
#include <mpi.h>
#include <string.h>

#include "say.h"

static int deleted;

static int count_delete(int object, int keyval, void *value, void *extra)
{
    (void)object;
    (void)keyval;
    deleted += *(int *)value + *(int *)extra;
    return MPI_SUCCESS;
}

/* A copy function that copies only a value above 5. */
static int copy_big(int object, int keyval, void *extra, void *in, void *out, int *flag)
{
    (void)object;
    (void)keyval;
    (void)extra;
    *flag = *(int *)in > 5;
    *(void **)out = in;
    return MPI_SUCCESS;
}

/* The code a delete function fails with: one the program added (or MPI_ERR_OTHER). */
static int delete_code = MPI_ERR_OTHER;

static int failing_delete(int object, int keyval, void *value, void *extra)
{
    (void)object;
    (void)keyval;
    (void)value;
    (void)extra;
    return delete_code;
}

static int class_of(int code)
{
    int c;
    MPI_Error_class(code, &c);
    return c;
}

static void type_attributes(void)
{
    static int extra = 100, seven = 7, three = 3, nine = 9;
    int dup_key, big_key, flag = -1, *got = NULL;
    MPI_Type_create_keyval(MPI_TYPE_DUP_FN, count_delete, &dup_key, &extra);
    MPI_Type_create_keyval(copy_big, MPI_TYPE_NULL_DELETE_FN, &big_key, NULL);
    MPI_Datatype pair, copy;
    MPI_Type_contiguous(2, MPI_INT, &pair);
    MPI_Type_commit(&pair);
    MPI_Type_get_attr(pair, dup_key, &got, &flag);
    SAY("type unset = %d", flag);
    MPI_Type_set_attr(pair, dup_key, &seven);
    MPI_Type_set_attr(pair, big_key, &three);
    MPI_Type_get_attr(pair, dup_key, &got, &flag);
    SAY("type get = %d %d", flag, flag ? *got : -1);

    /* A duplicate gets what the copy functions give: MPI_TYPE_DUP_FN's value, not copy_big's
     * small one. */
    MPI_Type_dup(pair, &copy);
    MPI_Type_get_attr(copy, dup_key, &got, &flag);
    SAY("type dup copied = %d %d", flag, flag ? *got : -1);
    MPI_Type_get_attr(copy, big_key, &got, &flag);
    SAY("type dup dropped = %d", flag);
    MPI_Type_set_attr(pair, big_key, &nine);
    MPI_Datatype copy2;
    MPI_Type_dup(pair, &copy2);
    MPI_Type_get_attr(copy2, big_key, &got, &flag);
    SAY("type dup big = %d %d", flag, flag ? *got : -1);

    /* Setting again deletes the old value; freeing a type deletes its values; so does
     * MPI_Type_delete_attr. */
    MPI_Type_set_attr(pair, dup_key, &nine);
    SAY("type replaced deletes = %d", deleted);
    MPI_Type_free(&copy);
    SAY("type free deletes = %d", deleted);
    MPI_Type_delete_attr(pair, dup_key);
    MPI_Type_get_attr(pair, dup_key, &got, &flag);
    SAY("type delete = %d flag %d", deleted, flag);

    /* A predefined type takes attributes too. */
    MPI_Type_set_attr(MPI_INT, dup_key, &three);
    MPI_Type_get_attr(MPI_INT, dup_key, &got, &flag);
    SAY("predefined type = %d %d", flag, flag ? *got : -1);
    MPI_Type_delete_attr(MPI_INT, dup_key);
    SAY("predefined type deleted = %d", deleted);

    MPI_Type_free_keyval(&dup_key);
    MPI_Type_free_keyval(&big_key);
    SAY("type keys freed = %d %d", dup_key == MPI_KEYVAL_INVALID, big_key == MPI_KEYVAL_INVALID);
    MPI_Type_free(&copy2);
    MPI_Type_free(&pair);
}

static void window_attributes(void)
{
    static int extra = 1000, five = 5;
    int key, flag = -1, *got = NULL, *unit = NULL;
    int buf[4];
    MPI_Win win;
    MPI_Win_create(buf, sizeof buf, sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &win);
    MPI_Win_create_keyval(MPI_WIN_NULL_COPY_FN, count_delete, &key, &extra);
    MPI_Win_get_attr(win, key, &got, &flag);
    SAY("win unset = %d", flag);
    MPI_Win_set_attr(win, key, &five);
    MPI_Win_get_attr(win, key, &got, &flag);
    SAY("win get = %d %d", flag, flag ? *got : -1);
    MPI_Win_get_attr(win, MPI_WIN_DISP_UNIT, &unit, &flag);
    SAY("win predefined still = %d %d", flag, flag ? *unit : -1);
    MPI_Win_delete_attr(win, key);
    SAY("win delete = %d", deleted);
    MPI_Win_set_attr(win, key, &five);
    MPI_Win_free(&win);
    SAY("win free deletes = %d", deleted);
    MPI_Win_free_keyval(&key);
    SAY("win key freed = %d", key == MPI_KEYVAL_INVALID);
}

static void attribute_errors(void)
{
    static int one = 1;
    int comm_key, type_key, flag = -1, *got = NULL;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, MPI_COMM_NULL_DELETE_FN, &comm_key, NULL);
    MPI_Type_create_keyval(MPI_TYPE_NULL_COPY_FN, failing_delete, &type_key, NULL);
    /* A communicator's key on a datatype, a datatype's on a communicator. */
    SAY("comm key on type = %d", class_of(MPI_Type_set_attr(MPI_INT, comm_key, &one)));
    SAY("type key on comm = %d", class_of(MPI_Comm_set_attr(MPI_COMM_WORLD, type_key, &one)));
    SAY("no key = %d", class_of(MPI_Type_get_attr(MPI_INT, 12345, &got, &flag)));
    /* A delete function's error is the call's. */
    MPI_Type_set_attr(MPI_DOUBLE, type_key, &one);
    int err = MPI_Type_delete_attr(MPI_DOUBLE, type_key);
    SAY("delete function fails = %d", err != MPI_SUCCESS);
    /* ... with the program's own code, passed back as it is. */
    int own_class;
    MPI_Add_error_class(&own_class);
    MPI_Add_error_code(own_class, &delete_code);
    err = MPI_Type_delete_attr(MPI_DOUBLE, type_key);
    SAY("delete function's own code = %d %d", err == delete_code, class_of(err) == own_class);
    delete_code = MPI_SUCCESS;
    MPI_Type_delete_attr(MPI_DOUBLE, type_key);
    /* Deleting a value never set is no error; a window's key names no communicator's
       attribute. */
    SAY("delete unset = %d", MPI_Type_delete_attr(MPI_DOUBLE, type_key));
    SAY("window key on a communicator = %d", class_of(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_WIN_SIZE, &got, &flag)));
    MPI_Comm_free_keyval(&comm_key);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
}

static int handled_class, handled_len;
static char handled_text[MPI_MAX_ERROR_STRING];

static void remember(MPI_Comm *comm, int *code, ...)
{
    (void)comm;
    handled_class = class_of(*code);
    MPI_Error_string(*code, handled_text, &handled_len);
}

static void error_classes(void)
{
    int added, code, code2, len, flag = -1, *last = NULL;
    char text[MPI_MAX_ERROR_STRING];
    MPI_Add_error_class(&added);
    MPI_Add_error_code(added, &code);
    MPI_Add_error_code(added, &code2);
    SAY("added above last code = %d %d %d", added > MPI_ERR_LASTCODE, code > MPI_ERR_LASTCODE,
        code2 > MPI_ERR_LASTCODE);
    SAY("added distinct = %d", added != code && code != code2 && added != code2);
    SAY("classes = %d %d %d", class_of(added) == added, class_of(code) == added, class_of(code2) == added);
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_LASTUSEDCODE, &last, &flag);
    SAY("last used = %d %d", flag, flag && *last >= added);

    MPI_Add_error_string(added, "the program's own class");
    MPI_Add_error_string(code, "the program's first code");
    MPI_Error_string(added, text, &len);
    SAY("class text = %s %d", text, len == (int)strlen(text));
    MPI_Error_string(code, text, &len);
    SAY("code text = %s", text);
    MPI_Add_error_string(code, "said again");
    MPI_Error_string(code, text, &len);
    SAY("code text again = %s", text);

    /* The program's handler gets the program's code, and MPI reads it. */
    MPI_Errhandler h;
    MPI_Comm_create_errhandler(remember, &h);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, h);
    MPI_Comm_call_errhandler(MPI_COMM_WORLD, code);
    SAY("handler saw = %d %s %d", handled_class == added, handled_text, handled_len == (int)strlen(handled_text));

    /* A code of a predefined class. */
    int arg_code, unknown_code;
    MPI_Add_error_code(MPI_ERR_ARG, &arg_code);
    MPI_Add_error_code(MPI_ERR_UNKNOWN, &unknown_code);
    SAY("code of a predefined class = %d %d", class_of(arg_code) == MPI_ERR_ARG, class_of(unknown_code) == MPI_ERR_UNKNOWN);
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_APPNUM, &last, &flag);
    SAY("appnum = %d %d", flag, flag ? *last : -1);

    /* A string for a code the program did not add. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    SAY("string of unknown code = %d", class_of(MPI_Add_error_string(added + 1000, "x")));
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    MPI_Errhandler_free(&h);
}

static void addresses_and_kinds(void)
{
    int a[8] = {0};
    MPI_Aint base, third, back;
    MPI_Get_address(&a[0], &base);
    MPI_Get_address(&a[3], &third);
    SAY("aint diff = %ld", (long)MPI_Aint_diff(third, base));
    back = MPI_Aint_add(base, 3 * (MPI_Aint)sizeof(int));
    SAY("aint add = %d", back == third);
    SAY("aint add negative = %d", MPI_Aint_add(third, -3 * (MPI_Aint)sizeof(int)) == base);

    int flag = -1;
    MPI_Comm_test_inter(MPI_COMM_WORLD, &flag);
    SAY("world is inter = %d", flag);
    MPI_Comm dup;
    MPI_Comm_dup(MPI_COMM_SELF, &dup);
    MPI_Comm_test_inter(dup, &flag);
    SAY("dup is inter = %d", flag);
    MPI_Comm_free(&dup);
    MPI_Comm parent = MPI_COMM_WORLD;
    MPI_Comm_get_parent(&parent);
    SAY("parent is null = %d", parent == MPI_COMM_NULL);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    SAY("test inter of no comm = %d", class_of(MPI_Comm_test_inter(MPI_COMM_NULL, &flag)));
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    type_attributes();
    window_attributes();
    attribute_errors();
    error_classes();
    addresses_and_kinds();
    MPI_Finalize();
    return 0;
}
