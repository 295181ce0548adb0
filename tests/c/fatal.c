/* Under the default handler (MPI_ERRORS_ARE_FATAL), an error ends the job: rank 1 sends to
 * a rank that does not exist, while the others wait in a barrier. With the argument
 * "abort", rank 1 calls MPI_Abort with code 7 instead. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    int rank, x = 1;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 1 && argc > 1 && strcmp(argv[1], "abort") == 0)
        MPI_Abort(MPI_COMM_WORLD, 7);
    if (rank == 1)
        MPI_Send(&x, 1, MPI_INT, 99, 0, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    printf("%d: not reached\n", rank);
    MPI_Finalize();
    return 0;
}
