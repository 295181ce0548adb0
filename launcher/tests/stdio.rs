//! Forwarding of the ranks' output: line by line, never interleaved mid-line; a partial line
//! once its rank pauses on it.

mod common;

use std::collections::BTreeMap;
use std::io::Read;
use std::process::Output;
use std::time::{Duration, Instant};

use common::{code, mprun, run, stderr, stdout, TempDir};

#[test]
fn tag_output_prefixes_every_line() {
    let out = run(&["--tag-output", "-np", "3", "sh", "-c", "echo one; echo two; echo err >&2"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let mut lines: Vec<_> = stdout(&out).lines().map(String::from).collect();
    lines.sort();
    let mut expected: Vec<String> = (0..3).flat_map(|r| [format!("[{r}] one"), format!("[{r}] two")]).collect();
    expected.sort();
    assert_eq!(lines, expected);
    let mut errs: Vec<_> = stderr(&out).lines().map(String::from).collect();
    errs.sort();
    assert_eq!(errs, ["[0] err", "[1] err", "[2] err"].map(String::from));
}

#[test]
fn untagged_output_is_passed_through() {
    let out = run(&["-np", "1", "sh", "-c", "echo out; echo err >&2; printf 'no newline'"]);
    assert_eq!(code(&out), 0);
    assert_eq!(stdout(&out), "out\nno newline");
    assert_eq!(stderr(&out), "err\n");
}

/// Each rank writes `LINES` lines of 10,000 copies of its rank digit, to stdout and stderr
/// at once; every line mprun forwards must be whole.
fn long_lines(tag: bool) {
    const LINES: usize = 60;
    const WIDTH: usize = 10_000;
    let script = format!(
        "line=$(printf '%{WIDTH}s' '' | tr ' ' \"$MPR_RANK\"); i=0; \
         while [ $i -lt {LINES} ]; do echo \"$line\"; echo \"$line\" >&2; i=$((i+1)); done"
    );
    let mut args = vec!["-np", "3"];
    if tag {
        args.push("--tag-output");
    }
    args.extend(["sh", "-c", &script]);
    let out = run(&args);
    assert_eq!(code(&out), 0, "{}", stderr(&out).chars().take(500).collect::<String>());
    for text in [stdout(&out), stderr(&out)] {
        let mut per_rank = BTreeMap::new();
        for line in text.lines() {
            let (rank, body) = match line.strip_prefix('[') {
                Some(rest) if tag => {
                    let (rank, body) = rest.split_once("] ").expect("tagged line");
                    (rank.chars().next().unwrap(), body)
                }
                _ => (line.chars().next().unwrap(), line),
            };
            assert!(!tag || line.starts_with('['), "untagged line under --tag-output");
            assert_eq!(body.len(), WIDTH, "a line was cut or joined");
            assert!(body.chars().all(|c| c == rank), "lines of different ranks interleaved");
            *per_rank.entry(rank).or_insert(0) += 1;
        }
        assert_eq!(per_rank, [('0', LINES), ('1', LINES), ('2', LINES)].into());
    }
}

#[test]
fn long_lines_from_several_ranks_stay_whole() {
    long_lines(false);
}

#[test]
fn long_tagged_lines_from_several_ranks_stay_whole() {
    long_lines(true);
}

#[test]
fn a_grandchild_holding_a_pipe_does_not_keep_mprun_waiting() {
    let dir = TempDir::new("grandchild");
    let script = format!("sleep 30 & echo $! > {}/sleeper; echo started", dir.str());
    let start = std::time::Instant::now();
    let out = run(&["-np", "1", "sh", "-c", &script]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(stdout(&out), "started\n");
    assert!(start.elapsed().as_secs() < 10);
    let sleeper: i32 = dir.wait_for("sleeper").parse().unwrap();
    assert!(common::gone(sleeper), "the rank's leftover child {sleeper} is still running");
}

/// Runs mprun with `args` and returns what its stdout carried, each read with the time it
/// arrived (from the start).
fn timed_stdout(args: &[&str]) -> (Output, Vec<(Duration, Vec<u8>)>) {
    let mut child = mprun(args).spawn().expect("mprun starts");
    let mut pipe = child.stdout.take().unwrap();
    let start = Instant::now();
    let reader = std::thread::spawn(move || {
        let (mut reads, mut buf) = (Vec::new(), [0u8; 4096]);
        while let Ok(n @ 1..) = pipe.read(&mut buf) {
            reads.push((start.elapsed(), buf[..n].to_vec()));
        }
        reads
    });
    let out = common::wait(child);
    (out, reader.join().unwrap())
}

#[test]
fn a_prompt_without_a_newline_shows_before_the_rank_goes_on() {
    // A rank prints a prompt (no newline) and then waits: the prompt must reach mprun's
    // stdout while it waits, not with the line's end 3 s later; here and through a host's
    // proxy (`--launcher fork`), untagged and tagged (the line's rest is not tagged again).
    let rank = "printf '> '; sleep 3; echo done";
    for (args, want) in [
        (&["-np", "1"][..], "> done\n"),
        (&["--tag-output", "-np", "1"][..], "[0] > done\n"),
        (&["--launcher", "fork", "-H", "a:1"][..], "> done\n"),
        (&["--launcher", "fork", "-H", "a:1", "--tag-output"][..], "[0] > done\n"),
    ] {
        let (out, reads) = timed_stdout(&[args, &["sh", "-c", rank]].concat());
        assert_eq!(code(&out), 0, "{args:?}: {}", stderr(&out));
        let all: Vec<u8> = reads.iter().flat_map(|(_, d)| d.clone()).collect();
        assert_eq!(String::from_utf8_lossy(&all), want, "{args:?}");
        let at = |s: &[u8]| reads.iter().find(|(_, d)| d.windows(s.len()).any(|w| w == s)).map(|(t, _)| *t).unwrap();
        let (prompt, done) = (at(b"> "), at(b"done"));
        assert!(
            done > prompt + Duration::from_secs(1),
            "{args:?}: the prompt came at {prompt:?}, with the line's end at {done:?}"
        );
    }
}
