//! tcp-floor: the raw TCP floor mpr's TCP transport is measured against. Two processes,
//! one connection, no runtime: a busy-polling ping-pong (one-way latency, us) and a windowed
//! stream (MB/s), printed in the OSU format like mpr-bench.
//!
//! `tcp-floor latency|bw [--bind IP] [--max BYTES] [--iters N]`
//! The second process is this program again, started with `TCP_FLOOR_EXEC` as a prefix
//! (e.g. `ip netns exec hostB`) if set, connecting to the first one's address.

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Command;
use std::time::Instant;

fn read_full(s: &mut TcpStream, buf: &mut [u8]) {
    let mut got = 0;
    while got < buf.len() {
        match s.read(&mut buf[got..]) {
            Ok(0) => panic!("peer closed"),
            Ok(n) => got += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => std::hint::spin_loop(),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => panic!("read: {e}"),
        }
    }
}

fn write_full(s: &mut TcpStream, buf: &[u8]) {
    let mut put = 0;
    while put < buf.len() {
        match s.write(&buf[put..]) {
            Ok(n) => put += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => std::hint::spin_loop(),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => panic!("write: {e}"),
        }
    }
}

fn sizes(min: usize, max: usize) -> Vec<usize> {
    let mut v = if min == 0 { vec![0] } else { vec![] };
    let mut s = 1;
    while s <= max {
        if s >= min {
            v.push(s);
        }
        s *= 2;
    }
    v
}

fn iters(size: usize, base: usize) -> usize {
    if size > 64 << 10 {
        (base / 10).max(10)
    } else {
        base
    }
}

/// `leader`: the process that prints. Both run the same schedule.
fn run(what: &str, s: &mut TcpStream, leader: bool, max: usize, base: usize) {
    s.set_nodelay(true).unwrap();
    s.set_nonblocking(true).unwrap();
    let mut sbuf = vec![b'a'; max.max(4)];
    let mut rbuf = vec![0u8; max.max(4)];
    match what {
        "latency" => {
            if leader {
                println!("# tcp-floor Latency Test (busy-polling nonblocking socket)");
                println!("# Size          Latency (us)");
            }
            // Zero bytes would move nothing over a raw stream: start at one.
            for size in sizes(1, max) {
                let n = iters(size, base);
                let t0 = Instant::now();
                for _ in 0..n {
                    if leader {
                        write_full(s, &sbuf[..size]);
                        read_full(s, &mut rbuf[..size]);
                    } else {
                        read_full(s, &mut rbuf[..size]);
                        write_full(s, &sbuf[..size]);
                    }
                }
                if leader {
                    let us = t0.elapsed().as_secs_f64() * 1e6 / (2.0 * n as f64);
                    println!("{size:<10}{us:>18.2}");
                }
            }
        }
        "bw" => {
            if leader {
                println!("# tcp-floor Bandwidth Test (window 64)");
                println!("# Size      Bandwidth (MB/s)");
            }
            for size in sizes(1, max) {
                let n = iters(size, base / 50).max(5);
                let t0 = Instant::now();
                for _ in 0..n {
                    if leader {
                        for _ in 0..64 {
                            write_full(s, &sbuf[..size]);
                        }
                        read_full(s, &mut rbuf[..4]);
                    } else {
                        for _ in 0..64 {
                            read_full(s, &mut rbuf[..size]);
                        }
                        sbuf[0] = 1;
                        write_full(s, &sbuf[..4]);
                    }
                }
                if leader {
                    let mbs = (size * 64 * n) as f64 / t0.elapsed().as_secs_f64() / 1e6;
                    println!("{size:<10}{mbs:>18.2}");
                }
            }
        }
        other => {
            eprintln!("tcp-floor: unknown test {other} (latency, bw)");
            std::process::exit(2);
        }
    }
}

/// The raw TCP ping-pong and stream that mpr's TCP transport is measured against: a leader
/// process and a second one it starts (through `TCP_FLOOR_EXEC`, e.g. `ip netns exec NS`,
/// when set) exchange messages over one socket, with nothing of mpr between them.
#[derive(clap::Parser, Debug)]
#[command(name = "tcp-floor", version, about, long_about = None)]
struct Args {
    /// `latency` (one-way, us) or `bw` (MB/s).
    #[arg(value_enum, default_value_t = Test::Latency)]
    what: Test,
    /// Address the leader listens on.
    #[arg(long, default_value = "127.0.0.1", value_name = "ADDR")]
    bind: String,
    /// Run as the second process, connecting to the leader at ADDR:PORT.
    #[arg(long, value_name = "ADDR:PORT")]
    peer: Option<String>,
    /// Largest message (bytes).
    #[arg(long, default_value_t = 4 << 20, value_name = "BYTES")]
    max: usize,
    /// Timed iterations of small messages (fewer for large ones).
    #[arg(long, default_value_t = 10_000, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    iters: u64,
}

/// The tests.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Test {
    Latency,
    Bw,
}

fn main() {
    let Args { what, bind, peer, max, iters } = <Args as clap::Parser>::parse();
    let what = match what {
        Test::Latency => "latency".to_string(),
        Test::Bw => "bw".to_string(),
    };
    let base = iters as usize;
    if let Some(addr) = peer {
        let mut s = TcpStream::connect(&addr).expect("connect to the leader");
        run(&what, &mut s, false, max, base);
        return;
    }
    let l = TcpListener::bind((bind.as_str(), 0)).expect("bind");
    let addr = l.local_addr().unwrap().to_string();
    let me = std::env::current_exe().unwrap();
    let prefix: Vec<String> =
        std::env::var("TCP_FLOOR_EXEC").unwrap_or_default().split_whitespace().map(String::from).collect();
    let mut cmd = match prefix.split_first() {
        Some((p, rest)) => {
            let mut c = Command::new(p);
            c.args(rest).arg(&me);
            c
        }
        None => Command::new(&me),
    };
    let mut child = cmd
        .args([what.as_str(), "--peer", &addr, "--max", &max.to_string(), "--iters", &base.to_string()])
        .spawn()
        .expect("start the second process");
    let (mut s, _) = l.accept().expect("accept");
    run(&what, &mut s, true, max, base);
    let _ = child.wait();
}
