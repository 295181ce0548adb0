/* Arithmetic on C's long double for the run-time kernel table (datatype.rs), which the C
 * ABI's reductions and accumulates share: Rust has no such type, the C compiler has it on
 * every platform. */
/* Only the compiler's own header: the file compiles for any target without its C library's
 * headers (a check of the macOS build from Linux, say). */
#include <stddef.h>

/* acc[i] = x[i] (op) acc[i] for n long doubles, which may be unaligned (packed data): each
 * is copied through a local. op: 0 sum, 1 product, 2 maximum, 3 minimum. */
void mpr_long_double_op(int op, const unsigned char *x, unsigned char *acc, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        long double a, b;
        __builtin_memcpy(&a, x + i * sizeof a, sizeof a);
        __builtin_memcpy(&b, acc + i * sizeof b, sizeof b);
        switch (op) {
        case 0:
            b = a + b;
            break;
        case 1:
            b = a * b;
            break;
        case 2:
            if (a > b)
                b = a;
            break;
        default:
            if (a < b)
                b = a;
            break;
        }
        __builtin_memcpy(acc + i * sizeof b, &b, sizeof b);
    }
}

/* acc[i] = acc[i] (op) x[i] for n complex numbers of two long doubles each (real part
 * first), at any alignment. op: 0 sum, 1 product (as datatype.rs multiplies the other
 * complex types: the schoolbook formula). */
void mpr_long_double_complex_op(int op, const unsigned char *x, unsigned char *acc, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        long double a[2], b[2];
        __builtin_memcpy(a, x + i * sizeof a, sizeof a);
        __builtin_memcpy(b, acc + i * sizeof b, sizeof b);
        if (op == 0) {
            b[0] += a[0];
            b[1] += a[1];
        } else {
            long double p = b[0], q = b[1];
            b[0] = p * a[0] - q * a[1];
            b[1] = p * a[1] + q * a[0];
        }
        __builtin_memcpy(acc + i * sizeof b, b, sizeof b);
    }
}

/* -1, 0 or 1 as the long double at a is below, equal to (or unordered with) or above the
 * one at b, either at any alignment. */
int mpr_long_double_cmp(const unsigned char *a, const unsigned char *b)
{
    long double x, y;
    __builtin_memcpy(&x, a, sizeof x);
    __builtin_memcpy(&y, b, sizeof y);
    return x < y ? -1 : x > y ? 1 : 0;
}

/* Bytes of a long double (datatype.rs checks its own figure against it). */
size_t mpr_long_double_size(void)
{
    return sizeof(long double);
}

/* A long double of v at p, and a double of the long double at p (unit tests). */
void mpr_long_double_from(double v, unsigned char *p)
{
    long double l = v;
    __builtin_memcpy(p, &l, sizeof l);
}

double mpr_long_double_to(const unsigned char *p)
{
    long double l;
    __builtin_memcpy(&l, p, sizeof l);
    return (double)l;
}
