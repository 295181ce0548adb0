//! The demo job: every rank greets, then a token travels around the ring of ranks.
//!
//! `mprun -np 4 mpr-hello`

fn main() -> mpr::Result<()> {
    let universe = mpr::init()?;
    let world = universe.world();
    let (rank, size) = (world.rank(), world.size());
    let host = std::env::var("MPR_HOST").unwrap_or_else(|_| "this host".into());
    println!("hello from rank {rank} of {size} on {host}");

    // Rank 0 starts a token; each rank adds its rank and passes it on.
    let next = (rank + 1) % size;
    let prev = (rank + size - 1) % size;
    let mut token = [0u64];
    if rank == 0 {
        world.send(&token, next, 0)?;
        world.recv(&mut token, prev, 0)?;
        let expect: u64 = (0..size as u64).sum();
        println!("token came back to rank 0 with {} (expected {expect})", token[0]);
        if token[0] != expect {
            std::process::exit(1);
        }
    } else {
        world.recv(&mut token, prev, 0)?;
        token[0] += rank as u64;
        world.send(&token, next, 0)?;
    }
    universe.finalize()
}
