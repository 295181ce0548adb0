/*
 * call_cost.c - what one MPI call costs a C program where no message moves: the C ABI's own
 * cost (handle checks, datatype and operation lookups, status), set beside another MPI's.
 * One rank: sends to and receives from MPI_PROC_NULL, MPI_Comm_rank, and collectives on
 * MPI_COMM_SELF. Prints nanoseconds per call.
 *
 *   target/release/mprcc -O2 -o cc.mpr benches/c/call_cost.c && target/release/mprun -np 1 ./cc.mpr
 *   mpicc.mpich -O2 -o cc.mpich benches/c/call_cost.c && mpiexec.mpich -n 1 ./cc.mpich
 */
#include <mpi.h>
#include <stdio.h>

#define CALLS 2000000

static double per_call(double t0) { return (MPI_Wtime() - t0) * 1e9 / CALLS; }

int main(int argc, char **argv)
{
    char buf[8] = {0};
    int rank, a = 1, b = 0;
    MPI_Init(&argc, &argv);
    double t = MPI_Wtime();
    for (int i = 0; i < CALLS; i++)
        MPI_Send(buf, 8, MPI_CHAR, MPI_PROC_NULL, 1, MPI_COMM_WORLD);
    double send = per_call(t);
    t = MPI_Wtime();
    for (int i = 0; i < CALLS; i++)
        MPI_Recv(buf, 8, MPI_CHAR, MPI_PROC_NULL, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    double recv = per_call(t);
    t = MPI_Wtime();
    for (int i = 0; i < CALLS; i++)
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    double comm_rank = per_call(t);
    t = MPI_Wtime();
    for (int i = 0; i < CALLS; i++)
        MPI_Allreduce(&a, &b, 1, MPI_INT, MPI_SUM, MPI_COMM_SELF);
    double allreduce = per_call(t);
    t = MPI_Wtime();
    for (int i = 0; i < CALLS; i++)
        MPI_Bcast(&a, 1, MPI_INT, 0, MPI_COMM_SELF);
    double bcast = per_call(t);
    t = MPI_Wtime();
    for (int i = 0; i < CALLS; i++)
        MPI_Barrier(MPI_COMM_SELF);
    double barrier = per_call(t);
    printf("ns per call: send %.1f recv %.1f comm_rank %.1f allreduce %.1f bcast %.1f barrier %.1f (sum %d)\n", send,
           recv, comm_rank, allreduce, bcast, barrier, b);
    MPI_Finalize();
    return 0;
}
