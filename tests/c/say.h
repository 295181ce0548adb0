/* What the C ABI test programs share: "rank: what = value" lines, each written whole at once
 * (launchers may forward output as it is written, and the tests sort the lines). */
#ifndef MPR_TEST_SAY_H
#define MPR_TEST_SAY_H
#include <stdio.h>

static int rank, size;

#define SAY(...)                                                                                                       \
    do {                                                                                                               \
        char line_[512];                                                                                               \
        int n_ = snprintf(line_, sizeof line_, "%d: ", rank);                                                          \
        n_ += snprintf(line_ + n_, sizeof line_ - n_ - 1, __VA_ARGS__);                                                \
        line_[n_++] = '\n';                                                                                            \
        fwrite(line_, 1, (size_t)n_, stdout);                                                                          \
        fflush(stdout);                                                                                                \
    } while (0)

#endif
