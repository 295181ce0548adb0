/* mpr provides MPI_THREAD_FUNNELED: only the thread that called MPI_Init_thread makes MPI
 * calls. A call from another thread is an error that ends the job, named; the calling
 * thread's own calls work before and after. */
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>

static void *other(void *arg)
{
    int size = 0;
    (void)arg;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    printf("other thread: size %d (not reached)\n", size);
    return NULL;
}

int main(int argc, char **argv)
{
    int provided = -1, rank = -1, main_thread = 0;
    pthread_t t;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Is_thread_main(&main_thread);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    printf("%d: provided %s, main %d\n", rank, provided == MPI_THREAD_FUNNELED ? "funneled" : "other", main_thread);
    fflush(stdout);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        pthread_create(&t, NULL, other, NULL);
        pthread_join(t, NULL);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    printf("%d: not reached\n", rank);
    MPI_Finalize();
    return 0;
}
