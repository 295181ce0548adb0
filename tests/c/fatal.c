/* Under the default handler (MPI_ERRORS_ARE_FATAL), an error ends the job: rank 1 sends to
 * a rank that does not exist, while the others wait in a barrier. */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    int rank, x = 1;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 1)
        MPI_Send(&x, 1, MPI_INT, 99, 0, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    printf("%d: not reached\n", rank);
    MPI_Finalize();
    return 0;
}
