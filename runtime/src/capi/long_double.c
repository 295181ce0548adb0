/* Reductions of C's long double for the C ABI (capi/types.rs): Rust has no such type, the C
 * compiler has it on every platform. */
#include <stddef.h>
#include <string.h>

/* acc[i] = x[i] (op) acc[i] for n long doubles, which may be unaligned (packed data): each
 * is copied through a local. op: 0 sum, 1 product, 2 maximum, 3 minimum. */
void mpr_long_double_op(int op, const unsigned char *x, unsigned char *acc, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        long double a, b;
        memcpy(&a, x + i * sizeof a, sizeof a);
        memcpy(&b, acc + i * sizeof b, sizeof b);
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
        memcpy(acc + i * sizeof b, &b, sizeof b);
    }
}
