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
