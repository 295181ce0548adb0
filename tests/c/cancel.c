/* MPI_Cancel of sends, printed as "rank: what = value" lines the test checks. MPI-3.1 3.8.4:
 * a send marked for cancellation either is cancelled or completes, and waiting for it always
 * returns. (MPICH 4.0.2 and Open MPI 4.1 wait for ever for the first of these, an unmatched
 * large send cancelled: there is no reference run to compare with.) */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "say.h"

#define BIG 100000 /* ints: large enough for a rendezvous on every transport */

static void fill(int *b, int n, int seed)
{
    for (int i = 0; i < n; i++)
        b[i] = seed * 7 + i;
}

/* How many elements differ from what fill() put. */
static long check(const int *b, int n, int seed)
{
    long bad = 0;
    for (int i = 0; i < n; i++)
        bad += b[i] != seed * 7 + i;
    return bad;
}

/* MPI_Cancel of sends. A rendezvous send (a large one, a synchronous one) that no receive
 * matched is withdrawn: its wait returns cancelled and its message never arrives; one that a
 * receive matched first is sent. A persistent send cancelled starts again; a send to self;
 * cancelled requests in a Waitall beside others, and seen by MPI_Request_get_status. An
 * eager send may be either (MPI lets it): its receiver gets the message exactly when it
 * was not cancelled. */
static void cancelled_sends(void)
{
    int next = (rank + 1) % size, prev = (rank + size - 1) % size, flag = -1, there = -1;
    int *big = (int *)malloc(BIG * sizeof(int)), *in = (int *)malloc(BIG * sizeof(int));
    int a = rank, x = -1, y = -1, theirs = -1;
    fill(big, BIG, rank);
    MPI_Request r, rr, rs[3];
    MPI_Status st, sts[3];

    MPI_Isend(big, BIG, MPI_INT, next, 40, MPI_COMM_WORLD, &r);
    MPI_Cancel(&r);
    MPI_Wait(&r, &st);
    MPI_Test_cancelled(&st, &flag);
    SAY("large send cancelled = %d, request null %d", flag, r == MPI_REQUEST_NULL);
    MPI_Issend(&a, 1, MPI_INT, next, 41, MPI_COMM_WORLD, &r);
    MPI_Cancel(&r);
    MPI_Wait(&r, &st);
    MPI_Test_cancelled(&st, &flag);
    SAY("synchronous send cancelled = %d", flag);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Iprobe(prev, 40, MPI_COMM_WORLD, &there, MPI_STATUS_IGNORE);
    MPI_Iprobe(prev, 41, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
    SAY("cancelled messages arrived: %d %d", there, flag);

    int e = rank + 100;
    MPI_Isend(&e, 1, MPI_INT, next, 42, MPI_COMM_WORLD, &r);
    MPI_Cancel(&r);
    MPI_Wait(&r, &st);
    MPI_Test_cancelled(&st, &flag);
    MPI_Sendrecv(&flag, 1, MPI_INT, next, 43, &theirs, 1, MPI_INT, prev, 43, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    if (theirs) {
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_Iprobe(prev, 42, MPI_COMM_WORLD, &there, MPI_STATUS_IGNORE);
        SAY("eager send: cancelled, or received: %d", !there);
    } else {
        MPI_Recv(&x, 1, MPI_INT, prev, 42, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Barrier(MPI_COMM_WORLD);
        SAY("eager send: cancelled, or received: %d", x == prev + 100);
    }

    /* Matched first: every receive is complete before the sends are cancelled. */
    MPI_Irecv(in, BIG, MPI_INT, prev, 44, MPI_COMM_WORLD, &rr);
    MPI_Isend(big, BIG, MPI_INT, next, 44, MPI_COMM_WORLD, &r);
    MPI_Wait(&rr, MPI_STATUS_IGNORE);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Cancel(&r);
    MPI_Wait(&r, &st);
    MPI_Test_cancelled(&st, &flag);
    SAY("matched send cancelled = %d, bad %ld", flag, check(in, BIG, prev));

    MPI_Request p;
    MPI_Send_init(big, BIG, MPI_INT, next, 45, MPI_COMM_WORLD, &p);
    MPI_Start(&p);
    MPI_Cancel(&p);
    MPI_Wait(&p, &st);
    MPI_Test_cancelled(&st, &flag);
    SAY("persistent send cancelled = %d, kept %d", flag, p != MPI_REQUEST_NULL);
    memset(in, 0, BIG * sizeof(int));
    /* (Every cancelled send is gone before a receive of its tag is posted.) */
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Irecv(in, BIG, MPI_INT, prev, 45, MPI_COMM_WORLD, &rr);
    MPI_Start(&p);
    MPI_Wait(&p, &st);
    MPI_Test_cancelled(&st, &flag);
    MPI_Wait(&rr, MPI_STATUS_IGNORE);
    SAY("started again: cancelled %d, bad %ld", flag, check(in, BIG, prev));
    MPI_Request_free(&p);

    MPI_Irecv(&x, 1, MPI_INT, prev, 46, MPI_COMM_WORLD, &rs[0]);
    MPI_Isend(big, BIG, MPI_INT, next, 47, MPI_COMM_WORLD, &rs[1]);
    MPI_Irecv(&y, 1, MPI_INT, prev, 48, MPI_COMM_WORLD, &rs[2]);
    MPI_Send(&a, 1, MPI_INT, next, 48, MPI_COMM_WORLD);
    MPI_Cancel(&rs[0]);
    MPI_Cancel(&rs[1]);
    int rc = MPI_Waitall(3, rs, sts), c[3];
    for (int i = 0; i < 3; i++)
        MPI_Test_cancelled(&sts[i], &c[i]);
    SAY("waitall: success %d, cancelled %d %d %d, got %d", rc == MPI_SUCCESS, c[0], c[1], c[2], y == prev);

    MPI_Isend(big, BIG, MPI_INT, next, 49, MPI_COMM_WORLD, &r);
    MPI_Cancel(&r);
    do
        MPI_Request_get_status(r, &flag, &st);
    while (!flag);
    MPI_Test_cancelled(&st, &flag);
    SAY("get_status: cancelled %d, request kept %d", flag, r != MPI_REQUEST_NULL);
    MPI_Wait(&r, &st);
    MPI_Test_cancelled(&st, &flag);
    SAY("then wait: cancelled %d", flag);

    MPI_Issend(&a, 1, MPI_INT, rank, 50, MPI_COMM_WORLD, &r);
    MPI_Cancel(&r);
    MPI_Wait(&r, &st);
    MPI_Test_cancelled(&st, &flag);
    MPI_Iprobe(rank, 50, MPI_COMM_WORLD, &there, MPI_STATUS_IGNORE);
    SAY("send to self cancelled = %d, arrived %d", flag, there);
    MPI_Barrier(MPI_COMM_WORLD);
    free(big);
    free(in);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    cancelled_sends();
    SAY("done");
    MPI_Finalize();
    return 0;
}
