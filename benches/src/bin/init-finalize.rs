//! The smallest job: init, one barrier, finalize (the start-up benchmark's program, as
//! `benches/c/init_finalize.c` is for the MPI implementations).

fn main() {
    let universe = mpr::init().unwrap_or_else(|e| {
        eprintln!("init failed: {e}");
        std::process::exit(1)
    });
    if let Err(e) = universe.world().barrier() {
        eprintln!("barrier failed: {e}");
        std::process::exit(1);
    }
    if let Err(e) = universe.finalize() {
        eprintln!("finalize failed: {e}");
        std::process::exit(1);
    }
}
