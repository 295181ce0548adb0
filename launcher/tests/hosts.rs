//! Jobs over several hosts: placement, environment, stdin, failures, forged connections,
//! dead links.
//!
//! Two kinds of "hosts": with `--launcher fork` a host is only a name and its proxy runs on
//! this machine (runs anywhere); with the `netns` harness each host is a network namespace
//! joined to a bridge and its proxy is started by `--launcher-exec` through `ip netns exec`
//! (needs root and iproute2: those tests print why and pass if either is missing).

mod common;
#[path = "common/netns.rs"]
mod netns;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{code, gone, mprun, record_pid, run, run_with, stderr, stdout, TempDir};
use netns::NetHosts;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// Namespace hosts, or `None` (after saying why) where they cannot be made.
fn net_hosts(n: usize) -> Option<NetHosts> {
    if let Some(why) = netns::unavailable() {
        common::cannot_run(&format!("network namespaces unavailable: {why}"));
        return None;
    }
    Some(NetHosts::create(n))
}

/// Drops `hosts` and checks its namespaces are gone.
fn remove(hosts: NetHosts) {
    let names = hosts.netns.clone();
    drop(hosts);
    let out = Command::new("ip").args(["netns", "list"]).output().unwrap();
    let list = String::from_utf8_lossy(&out.stdout);
    for ns in names {
        assert!(!list.lines().any(|l| l.split_whitespace().next() == Some(&ns)), "{ns} was left behind");
    }
}

/// Sorted lines of text.
fn sorted_lines(text: &str) -> Vec<String> {
    let mut lines: Vec<String> = text.lines().map(String::from).collect();
    lines.sort();
    lines
}

/// A started mprun whose stderr is read as it comes.
struct Live {
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
    stdout: std::thread::JoinHandle<String>,
}

impl Live {
    fn start(mut command: Command) -> Live {
        command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = command.spawn().expect("mprun starts");
        let (tx, lines) = mpsc::channel();
        let err = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let mut out = child.stdout.take().unwrap();
        let stdout = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = out.read_to_string(&mut text);
            text
        });
        Live { child, lines, seen: Vec::new(), stdout }
    }

    /// Waits (up to 10 s) for a stderr line containing `pattern`.
    fn wait_line(&mut self, pattern: &str) -> String {
        let end = Instant::now() + Duration::from_secs(10);
        loop {
            let left = end.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if line.contains(pattern) {
                        return line;
                    }
                }
                Err(_) => panic!("no stderr line with {pattern:?}; got {:?}", self.seen),
            }
        }
    }

    /// Waits (up to `limit`) for mprun to end: its exit code, stdout and whole stderr.
    fn finish(mut self, limit: Duration) -> (i32, String, String) {
        let end = Instant::now() + limit;
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() >= end {
                let _ = self.child.kill();
                panic!("mprun did not finish within {limit:?}; stderr so far: {:?}", self.seen);
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(5)) {
            self.seen.push(line);
        }
        let out = self.stdout.join().unwrap();
        (status.code().unwrap_or(-1), out, self.seen.join("\n"))
    }
}

/// The control address mprun reports with `--verbose` (`... --connect IP:PORT ...`).
fn control_addr(live: &mut Live) -> SocketAddr {
    let line = live.wait_line("--connect ");
    let addr = line.split("--connect ").nth(1).unwrap().split_whitespace().next().unwrap();
    addr.parse().unwrap()
}

/// Shell snippet: wait until file `go` exists in `dir`.
fn wait_for_go(dir: &TempDir) -> String {
    format!("while [ ! -f {}/go ]; do sleep 0.05; done", dir.str())
}

/// Reads until the peer closes (`Ok`), or until `limit` passes or the read fails (`Err`,
/// saying which).
fn closed_within(stream: &mut TcpStream, limit: Duration) -> Result<(), String> {
    stream.set_read_timeout(Some(limit)).unwrap();
    let mut buf = [0u8; 256];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return Ok(()),
            // A signal is no answer from mprun: read on.
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            // Still open at the limit (WouldBlock or TimedOut), or a failure worth naming.
            Err(e) => return Err(format!("{e} ({:?})", e.kind())),
        }
    }
}

/// Connects to mprun's control port three times without the job secret: garbage, a `Hello`
/// with a wrong proof, and silence. Each must be closed; the job must not notice.
fn forge_connections(control: SocketAddr) {
    let mut garbage = TcpStream::connect(control).unwrap();
    garbage.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
    if let Err(e) = closed_within(&mut garbage, Duration::from_secs(5)) {
        panic!("garbage was not refused: {e}");
    }

    let mut forged = TcpStream::connect(control).unwrap();
    let mut challenge = [0u8; 39];
    forged.read_exact(&mut challenge).unwrap();
    assert_eq!(&challenge[..5], &[35, 0, 0, 0, 1], "a challenge frame: length 35, kind 1");
    // Hello: length 75, kind 2, the challenge's protocol version, host 0, a nonce, a proof
    // made without the secret, and no machine id.
    let mut hello = vec![75, 0, 0, 0, 2, challenge[5], challenge[6], 0, 0, 0, 0];
    hello.extend_from_slice(&[0x5a; 64]);
    hello.extend_from_slice(&[0; 4]);
    forged.write_all(&hello).unwrap();
    if let Err(e) = closed_within(&mut forged, Duration::from_secs(5)) {
        panic!("a wrong proof was not refused: {e}");
    }

    let mut silent = TcpStream::connect(control).unwrap();
    if let Err(e) = closed_within(&mut silent, Duration::from_secs(8)) {
        panic!("a silent connection was kept: {e}");
    }
}

// ---- hosts that are names on this machine (`--launcher fork`) ----

#[test]
fn fork_hosts_get_their_place_and_environment() {
    let script = "echo $MPR_RANK $MPR_SIZE $MPR_HOST $MPR_LOCAL_RANK $MPR_LOCAL_SIZE $PMI_RANK $MPR_HOST_ADDR \
                  $MPR_TEST_FWD $MPR_TEST_X $MPR_TEST_ENV $MPR_TRANSPORTS ${MPR_VERBOSE:-quiet}";
    let mut cmd = mprun(&[
        "--launcher",
        "fork",
        "-H",
        "a:2,b:2",
        "--host",
        "localhost",
        "-x",
        "MPR_TEST_X=x",
        "--env",
        "MPR_TEST_ENV=e=1",
        "--transports",
        "tcp",
        "sh",
        "-c",
        script,
    ]);
    cmd.env("MPR_TEST_FWD", "fwd");
    let out = run_with(cmd, None);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let want = [
        "0 5 a 0 2 0 127.0.0.1 fwd x e=1 tcp quiet",
        "1 5 a 1 2 1 127.0.0.1 fwd x e=1 tcp quiet",
        "2 5 b 0 2 2 127.0.0.1 fwd x e=1 tcp quiet",
        "3 5 b 1 2 3 127.0.0.1 fwd x e=1 tcp quiet",
        "4 5 localhost 0 1 4 127.0.0.1 fwd x e=1 tcp quiet",
    ];
    assert_eq!(sorted_lines(&stdout(&out)), want);
}

#[test]
fn iface_and_verbose_reach_every_host() {
    let script = "echo $MPR_HOST ${MPR_HOST_ADDR:-no-addr} $MPR_IFACE $MPR_VERBOSE";
    let out = run(&["--verbose", "--launcher", "fork", "--iface", "lo", "-H", "a,localhost", "sh", "-c", script]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(sorted_lines(&stdout(&out)), ["a no-addr lo 1", "localhost no-addr lo 1"]);
    assert!(stderr(&out).contains("--connect 127.0.0.1:"), "mprun listens on lo's address: {}", stderr(&out));
    // A subnet picks the interface whose address lies in it.
    let out = run(&["--verbose", "--launcher", "fork", "--iface", "127.0.0.0/8", "-H", "a", "sh", "-c", script]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stderr(&out).contains("--connect 127.0.0.1:"), "{}", stderr(&out));
    let out = run(&["--launcher", "fork", "--iface", "no-such-if0", "-H", "a", "true"]);
    assert_eq!(code(&out), 1);
    assert!(stderr(&out).starts_with("mprun: --iface no-such-if0: interface no-such-if0 has no IPv4 address"));
    // A job on this host alone checks it too, before its ranks start.
    let out = run(&["--iface", "no-such-if0", "-np", "2", "true"]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert!(
        stderr(&out).starts_with(
            "mprun: rank 0 could not be started: --iface no-such-if0: interface no-such-if0 has no IPv4 address"
        ),
        "{}",
        stderr(&out)
    );
}

/// `--iface` names an interface every host must have: a host without it fails the job
/// before its ranks start, naming the host and the interface (its ranks used to listen
/// elsewhere, or fail one by one).
#[test]
fn a_host_without_the_iface_is_named_before_its_ranks_start() {
    let Some(mut hosts) = net_hosts(2) else { return };
    // Host 0 has tb1 (its end of the cable), host 1 has tb0 only.
    hosts.cable(0, 1);
    let head = hosts.head.to_string();
    let list = hosts.host_list(&[1, 1]);
    let args = ["--launcher-exec", hosts.launcher_exec(), "--control-addr", &head, "--iface", "tb1", "-H", &list];
    let out = run(&[&args[..], &["sh", "-c", "echo $MPR_RANK $MPR_IFACE"]].concat());
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let want = format!(
        "mprun: rank 1 could not be started on host {}: --iface tb1: interface tb1 has no IPv4",
        hosts.names[1]
    );
    assert!(stderr(&out).contains(&want), "{}", stderr(&out));
    assert!(!stdout(&out).contains("1 tb1"), "rank 1 ran: {}", stdout(&out));
    // Both hosts have eth0: the job runs.
    let args = ["--launcher-exec", hosts.launcher_exec(), "--control-addr", &head, "--iface", "eth0", "-H", &list];
    let out = run(&[&args[..], &["sh", "-c", "echo $MPR_RANK $MPR_IFACE"]].concat());
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(sorted_lines(&stdout(&out)), ["0 eth0", "1 eth0"]);
    assert_eq!(hosts.wait_empty(Duration::from_secs(5)), Vec::<u32>::new());
    remove(hosts);
}

#[test]
fn ranks_beyond_the_slots_go_round_robin_and_ppn_sets_the_slots() {
    let script = "echo $MPR_RANK $MPR_HOST";
    let out = run(&["--launcher", "fork", "-np", "5", "-H", "a:2,b", "sh", "-c", script]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(sorted_lines(&stdout(&out)), ["0 a", "1 a", "2 b", "3 a", "4 b"]);
    let out = run(&["--launcher", "fork", "-ppn", "1", "-H", "a:4,b:4", "sh", "-c", script]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(sorted_lines(&stdout(&out)), ["0 a", "1 b"]);
}

#[test]
fn hostfiles_of_both_forms_place_ranks() {
    let dir = TempDir::new("hostfile");
    for text in ["# two hosts\nh1 slots=2\n\nh2 slots=1 # spare\n", "h1:2\n# comment\nh2\n"] {
        let file = dir.path().join("hosts");
        std::fs::write(&file, text).unwrap();
        let out =
            run(&["--launcher", "fork", "--hostfile", file.to_str().unwrap(), "sh", "-c", "echo $MPR_RANK $MPR_HOST"]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        assert_eq!(sorted_lines(&stdout(&out)), ["0 h1", "1 h1", "2 h2"], "{text:?}");
    }
}

#[test]
fn a_malformed_hostfile_is_a_usage_error_naming_the_line() {
    let dir = TempDir::new("bad-hostfile");
    let file = dir.path().join("hosts");
    std::fs::write(&file, "h1 slots=2\n\nh2 slots=two\n").unwrap();
    let out = run(&["--hostfile", file.to_str().unwrap(), "true"]);
    assert_eq!(code(&out), 2);
    common::assert_one_line(
        &out,
        &format!("mprun: {}:3: expected a slot count from 1 to 65536, got 'two'", file.display()),
    );
}

#[test]
fn stdin_reaches_a_remote_rank_0_whole() {
    // 3 MB through the control connection, more than the flow-control window.
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    let cmd = mprun(&["--launcher", "fork", "-H", "a,b", "sh", "-c", "echo $MPR_RANK $(cksum)"]);
    let out = run_with(cmd, Some(&data));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let mut expected = Command::new("cksum").stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    expected.stdin.take().unwrap().write_all(&data).unwrap();
    let sum = String::from_utf8(expected.wait_with_output().unwrap().stdout).unwrap();
    let empty = String::from_utf8(Command::new("cksum").stdin(Stdio::null()).output().unwrap().stdout).unwrap();
    assert_eq!(sorted_lines(&stdout(&out)), [format!("0 {}", sum.trim()), format!("1 {}", empty.trim())]);
}

#[test]
fn pmi_spans_hosts() {
    let exe = std::env::current_exe().unwrap();
    let client = exe.parent().unwrap().parent().unwrap().join("examples").join("pmi_client");
    let out = run(&["--launcher", "fork", "-H", "a:2,b:1,localhost:2", client.to_str().unwrap()]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(out.stderr.is_empty(), "{}", stderr(&out));
}

#[test]
fn a_rank_failing_on_a_fork_host_names_the_host() {
    let dir = TempDir::new("fork-fail");
    let script = format!(
        "{}; if [ $MPR_RANK = 2 ]; then while [ $(ls {}/pid.? | wc -l) -lt 4 ]; do sleep 0.01; done; exit 3; fi; \
         exec sleep 30",
        record_pid(&dir),
        dir.str()
    );
    let child = mprun(&["--launcher", "fork", "-H", "a:2,b:2", "sh", "-c", &script]).spawn().unwrap();
    let out = common::wait(child);
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    let pids = dir.pids(4);
    let err = stderr(&out);
    assert_eq!(err, format!("mprun: rank 2 (pid {} on host b) exited with code 3; stopping the job\n", pids[2]));
    for pid in pids {
        assert!(gone(pid), "rank process {pid} is still running");
    }
}

#[test]
fn a_proxy_that_dies_stops_the_job_naming_its_host() {
    let dir = TempDir::new("proxy-dies");
    let script = format!("echo $PPID > {}/proxy.$MPR_HOST; {}; exec sleep 30", dir.str(), record_pid(&dir));
    let child = mprun(&["--launcher", "fork", "-H", "a,b", "sh", "-c", &script]).spawn().unwrap();
    let pids = dir.pids(2);
    let proxy: i32 = dir.wait_for("proxy.b").parse().unwrap();
    kill(Pid::from_raw(proxy), Signal::SIGKILL).unwrap();
    let out = common::wait(child);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert_eq!(
        stderr(&out),
        "mprun: host b: lost the control connection to its proxy (the connection was closed); stopping the job\n"
    );
    for pid in pids {
        assert!(gone(pid), "rank process {pid} is still running");
    }
}

#[test]
fn forged_control_connections_are_rejected_and_the_job_goes_on() {
    let dir = TempDir::new("forged-fork");
    let script = format!("{}; echo ok $MPR_RANK", wait_for_go(&dir));
    let mut live = Live::start(mprun(&[
        "--verbose",
        "--host-timeout",
        "2",
        "--launcher",
        "fork",
        "-H",
        "a,b",
        "sh",
        "-c",
        &script,
    ]));
    let control = control_addr(&mut live);
    live.wait_line("host b: proxy connected");
    forge_connections(control);
    std::fs::write(dir.path().join("go"), "").unwrap();
    let (code, out, err) = live.finish(Duration::from_secs(20));
    assert_eq!(code, 0, "{err}");
    assert_eq!(sorted_lines(&out), ["ok 0", "ok 1"]);
    assert_rejections(&err);
}

fn assert_rejections(err: &str) {
    let rejected: Vec<&str> = err.lines().filter(|l| l.contains("rejected a control connection from")).collect();
    assert_eq!(rejected.len(), 3, "{err}");
    assert!(rejected[0].contains("sent a bad frame"), "{err}");
    assert!(rejected[1].contains("wrong proof"), "{err}");
    assert!(rejected[2].contains("did not prove it belongs to the job within 2 s"), "{err}");
}

/// Seventy connections that never prove themselves, made before the proxy connects (more
/// than mprun keeps waiting at once): each beyond the limit closes the oldest, so the
/// proxy's connection still gets in, with the host timeout at its default of 30 s.
#[test]
fn a_flood_of_silent_control_connections_does_not_keep_the_proxy_out() {
    let dir = TempDir::new("flood");
    let launcher = dir.path().join("late");
    // Waits for `go`, then runs the proxy command (its arguments after the host's name).
    std::fs::write(&launcher, format!("#!/bin/sh\n{}\nshift\nexec \"$@\"\n", wait_for_go(&dir))).unwrap();
    std::fs::set_permissions(&launcher, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut live = Live::start(mprun(&[
        "--verbose",
        "--control-addr",
        "127.0.0.1",
        "--launcher-exec",
        launcher.to_str().unwrap(),
        "-H",
        "192.0.2.79",
        "sh",
        "-c",
        "echo ok $MPR_RANK",
    ]));
    let control = control_addr(&mut live);
    let silent: Vec<TcpStream> = (0..70).map(|_| TcpStream::connect(control).unwrap()).collect();
    for _ in 0..6 {
        live.wait_line("too many connections waiting to prove themselves, and it was the oldest");
    }
    std::fs::write(dir.path().join("go"), "").unwrap();
    let (code, out, err) = live.finish(Duration::from_secs(20));
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "ok 0\n");
    assert!(err.contains("host 192.0.2.79: proxy connected"), "{err}");
    drop(silent);
}

#[test]
fn a_launcher_command_that_fails_names_the_host_at_once() {
    let start = Instant::now();
    // 192.0.2.0/24 is TEST-NET-1: never contacted (the launcher is `false`).
    let out =
        run(&["--control-addr", "127.0.0.1", "--launcher-exec", "false", "-H", "localhost,192.0.2.77", "sleep", "30"]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert_eq!(
        stderr(&out),
        "mprun: host 192.0.2.77: cannot start its proxy: its launcher command exited with code 1 before the \
         proxy connected; stopping the job\n"
    );
    assert!(start.elapsed() < Duration::from_secs(5), "{:?}", start.elapsed());
    let out = run(&["--control-addr", "127.0.0.1", "--launcher-exec", "/no/such/launcher", "-H", "192.0.2.77", "true"]);
    assert_eq!(code(&out), 1);
    assert!(stderr(&out).starts_with("mprun: host 192.0.2.77: cannot start its proxy: cannot run '/no/such/launcher'"));
}

#[test]
fn a_proxy_that_never_connects_stops_the_job_after_the_bound() {
    let dir = TempDir::new("hang");
    let launcher = dir.path().join("hang");
    std::fs::write(&launcher, format!("#!/bin/sh\necho $$ > {}/launcher.pid\nexec sleep 30\n", dir.str())).unwrap();
    std::fs::set_permissions(&launcher, std::fs::Permissions::from_mode(0o755)).unwrap();
    let start = Instant::now();
    let out = run(&[
        "--control-addr",
        "127.0.0.1",
        "--host-timeout",
        "1",
        "--launcher-exec",
        launcher.to_str().unwrap(),
        "-H",
        "192.0.2.78",
        "true",
    ]);
    let elapsed = start.elapsed();
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert_eq!(
        stderr(&out),
        "mprun: host 192.0.2.78: cannot start its proxy: its proxy did not connect back within 1 s; stopping the job\n"
    );
    assert!(elapsed >= Duration::from_secs(1) && elapsed < Duration::from_secs(5), "{elapsed:?}");
    let pid: i32 = dir.wait_for("launcher.pid").parse().unwrap();
    assert!(gone(pid), "the launcher command {pid} is still running");
}

#[test]
fn proxies_stop_their_ranks_when_mprun_goes_silent() {
    let dir = TempDir::new("silent-mprun");
    let script = format!("{}; exec sleep 30", record_pid(&dir));
    let mut cmd = mprun(&["--host-timeout", "1", "--launcher", "fork", "-H", "a,b", "sh", "-c", &script]);
    cmd.env("MPR_KILL_GRACE_MS", "200");
    let child = cmd.spawn().unwrap();
    let mprun_pid = Pid::from_raw(child.id() as i32);
    let pids = dir.pids(2);
    kill(mprun_pid, Signal::SIGSTOP).unwrap();
    let start = Instant::now();
    let all_gone = pids.iter().all(|&pid| {
        while start.elapsed() < Duration::from_secs(6) {
            if gone(pid) {
                return true;
            }
        }
        false
    });
    let _ = kill(mprun_pid, Signal::SIGKILL);
    let _ = kill(mprun_pid, Signal::SIGCONT);
    let _ = common::wait(child);
    assert!(all_gone, "ranks outlived a silent mprun by {:?}", start.elapsed());
}

#[test]
fn a_killed_mprun_leaves_no_rank_on_any_host() {
    let dir = TempDir::new("killed-mprun");
    let script = format!("{}; exec sleep 30", record_pid(&dir));
    let child = mprun(&["--launcher", "fork", "-H", "a,b:2", "sh", "-c", &script]).spawn().unwrap();
    let pids = dir.pids(3);
    kill(Pid::from_raw(child.id() as i32), Signal::SIGKILL).unwrap();
    let _ = common::wait(child);
    for pid in pids {
        assert!(gone(pid), "rank process {pid} outlived mprun");
    }
}

/// A network namespace whose resolver never answers (its name server is a socket that reads
/// nothing), removed with its resolver file when dropped.
struct SilentResolver {
    ns: String,
    server: Child,
}

impl SilentResolver {
    fn create() -> SilentResolver {
        let ns = format!("mprt-dns-{}", std::process::id());
        let ip = |args: &[&str]| {
            let out = Command::new("ip").args(args).output().unwrap();
            assert!(out.status.success(), "ip {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        };
        ip(&["netns", "add", &ns]);
        ip(&["-n", &ns, "link", "set", "lo", "up"]);
        // `ip netns exec` puts /etc/netns/NS/resolv.conf in place of /etc/resolv.conf.
        let dir = format!("/etc/netns/{ns}");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(format!("{dir}/resolv.conf"), "nameserver 127.0.0.1\noptions timeout:5 attempts:2\n").unwrap();
        let sink = "import socket, time\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n\
                    s.bind(('127.0.0.1', 53))\nprint('ready', flush=True)\ntime.sleep(120)\n";
        let mut server = Command::new("ip")
            .args(["netns", "exec", &ns, "python3", "-c", sink])
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 runs the silent name server");
        let mut line = String::new();
        BufReader::new(server.stdout.take().unwrap()).read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "ready", "the silent name server did not start");
        SilentResolver { ns, server }
    }
}

impl Drop for SilentResolver {
    fn drop(&mut self) {
        let _ = self.server.kill();
        let _ = self.server.wait();
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).output();
        let _ = std::fs::remove_dir_all(format!("/etc/netns/{}", self.ns));
    }
}

/// Host names that never resolve (the resolver times out on each) do not make mprun deaf:
/// it looks them up many at once, and SIGTERM ends it within a second or two, exit 143,
/// while the lookups would have taken minutes one after another.
#[test]
fn sigterm_while_host_names_resolve_ends_mprun_at_once() {
    if let Some(why) = netns::unavailable() {
        common::cannot_run(&format!("network namespaces unavailable: {why}"));
        return;
    }
    let resolver = SilentResolver::create();
    let names: Vec<String> = (0..200).map(|i| format!("node{i}.cluster.example")).collect();
    let list = names.join(",");
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", &resolver.ns, env!("CARGO_BIN_EXE_mprun"), "--launcher-exec", "false", "-H", &list]);
    cmd.args(["true"]).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = cmd.spawn().unwrap();
    // `ip netns exec` execs mprun: the child is mprun itself.
    std::thread::sleep(Duration::from_millis(1500));
    kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM).unwrap();
    let signalled = Instant::now();
    let out = common::wait(child);
    let took = signalled.elapsed();
    assert_eq!(code(&out), 128 + 15, "{}", stderr(&out));
    assert!(stderr(&out).contains("mprun: received SIGTERM; stopping the job"), "{}", stderr(&out));
    assert!(took < Duration::from_secs(3), "mprun took {took:?} to obey SIGTERM while resolving");
    drop(resolver);
}

// ---- hosts that are network namespaces ----

#[test]
fn three_namespace_hosts_run_ranks_2_2_1() {
    let Some(hosts) = net_hosts(3) else { return };
    let script = "read line; echo $MPR_RANK $MPR_HOST $MPR_LOCAL_RANK $MPR_LOCAL_SIZE $MPR_HOST_ADDR [$line] \
                  $(ip -o -4 addr show dev eth0 | tr -s ' ' | cut -d' ' -f4)";
    let list = hosts.host_list(&[2, 2, 1]);
    let cmd = mprun(&["--launcher-exec", hosts.launcher_exec(), "-H", &list, "sh", "-c", script]);
    let out = run_with(cmd, Some(b"to rank 0\n"));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let mut by_rank = BTreeMap::new();
    for line in stdout(&out).lines() {
        let (rank, rest) = line.split_once(' ').unwrap();
        by_rank.insert(rank.parse::<usize>().unwrap(), rest.to_string());
    }
    let n = &hosts.names;
    let expect = |h: usize, local: usize, size: usize, input: &str| {
        format!("{} {local} {size} {} [{input}] {}/24", n[h], n[h], n[h])
    };
    let want: BTreeMap<usize, String> = [
        (0, expect(0, 0, 2, "to rank 0")),
        (1, expect(0, 1, 2, "")),
        (2, expect(1, 0, 2, "")),
        (3, expect(1, 1, 2, "")),
        (4, expect(2, 0, 1, "")),
    ]
    .into();
    assert_eq!(by_rank, want);
    assert_eq!(hosts.wait_empty(Duration::from_secs(5)), Vec::<u32>::new());
    remove(hosts);
}

#[test]
fn an_mlx_hostfile_with_user_at_host_logs_in_as_that_user_on_each_host() {
    let Some(hosts) = net_hosts(2) else { return };
    let dir = TempDir::new("ns-login");
    // What `mlx.distributed_config` writes for hosts reached as another user.
    let json = format!(
        r#"{{"backend": "jaccl", "envs": [], "hosts": [
            {{"ssh": "alice@{}", "ips": [], "rdma": []}},
            {{"ssh": "bob@{}", "ips": [], "rdma": []}}]}}"#,
        hosts.names[0], hosts.names[1]
    );
    let file = dir.path().join("hosts.json");
    std::fs::write(&file, json).unwrap();
    // The launcher command sees `user@host`, as ssh would; it logs that and runs the proxy
    // in the namespace of the host part.
    let wrapper = dir.path().join("login");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\necho \"$1\" >> {}/logins\nhost=${{1#*@}}; shift\nexec {} \"$host\" \"$@\"\n",
            dir.str(),
            hosts.launcher_exec()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = run(&[
        "--launcher-exec",
        wrapper.to_str().unwrap(),
        "--hostfile",
        file.to_str().unwrap(),
        "sh",
        "-c",
        "echo $MPR_RANK $MPR_HOST",
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(sorted_lines(&stdout(&out)), [format!("0 {}", hosts.names[0]), format!("1 {}", hosts.names[1])]);
    let logins = std::fs::read_to_string(dir.path().join("logins")).unwrap();
    assert_eq!(sorted_lines(&logins), sorted_lines(&format!("alice@{}\nbob@{}\n", hosts.names[0], hosts.names[1])));
    assert_eq!(hosts.wait_empty(Duration::from_secs(5)), Vec::<u32>::new());
    remove(hosts);
}

#[test]
fn a_rank_failing_on_a_namespace_host_names_it_and_stops_every_host() {
    let Some(hosts) = net_hosts(3) else { return };
    let dir = TempDir::new("ns-fail");
    let script = format!(
        "{}; if [ $MPR_RANK = 3 ]; then while [ $(ls {}/pid.? | wc -l) -lt 5 ]; do sleep 0.01; done; exit 3; fi; exec sleep 30",
        record_pid(&dir),
        dir.str()
    );
    let list = hosts.host_list(&[2, 2, 1]);
    let out = run(&["--launcher-exec", hosts.launcher_exec(), "-H", &list, "sh", "-c", &script]);
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    let pids = dir.pids(5);
    assert_eq!(
        stderr(&out),
        format!("mprun: rank 3 (pid {} on host {}) exited with code 3; stopping the job\n", pids[3], hosts.names[1])
    );
    for pid in pids {
        assert!(gone(pid), "rank process {pid} is still running");
    }
    assert_eq!(hosts.wait_empty(Duration::from_secs(5)), Vec::<u32>::new());
    remove(hosts);
}

#[test]
fn forged_connections_to_a_namespace_job_are_rejected() {
    let Some(hosts) = net_hosts(2) else { return };
    let dir = TempDir::new("ns-forged");
    let script = format!("{}; echo ok $MPR_RANK", wait_for_go(&dir));
    let list = hosts.host_list(&[1, 1]);
    let mut live = Live::start(mprun(&[
        "--verbose",
        "--host-timeout",
        "2",
        "--launcher-exec",
        hosts.launcher_exec(),
        "-H",
        &list,
        "sh",
        "-c",
        &script,
    ]));
    let control = control_addr(&mut live);
    assert_eq!(control.ip(), std::net::IpAddr::V4(hosts.head), "mprun listens on the bridge's address only");
    live.wait_line(&format!("host {}: proxy connected", hosts.names[1]));
    forge_connections(control);
    std::fs::write(dir.path().join("go"), "").unwrap();
    let (code, out, err) = live.finish(Duration::from_secs(20));
    assert_eq!(code, 0, "{err}");
    assert_eq!(sorted_lines(&out), ["ok 0", "ok 1"]);
    assert_rejections(&err);
    assert_eq!(hosts.wait_empty(Duration::from_secs(5)), Vec::<u32>::new());
    remove(hosts);
}

#[test]
fn a_namespace_host_whose_launcher_fails_is_named() {
    let Some(hosts) = net_hosts(1) else { return };
    let unknown = format!("{}.200", hosts.head.to_string().rsplit_once('.').unwrap().0);
    let list = format!("{}:1,{unknown}:1", hosts.names[0]);
    let start = Instant::now();
    let out = run(&["--launcher-exec", hosts.launcher_exec(), "-H", &list, "sleep", "30"]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains(&format!("launcher-exec: no test host {unknown}")), "{err}");
    assert!(
        err.contains(&format!(
            "mprun: host {unknown}: cannot start its proxy: its launcher command exited with code 1 before the proxy \
             connected; stopping the job"
        )),
        "{err}"
    );
    assert!(start.elapsed() < Duration::from_secs(10), "{:?}", start.elapsed());
    assert_eq!(hosts.wait_empty(Duration::from_secs(5)), Vec::<u32>::new());
    remove(hosts);
}

#[test]
fn a_link_down_mid_job_stops_the_job_within_the_bound() {
    let Some(hosts) = net_hosts(3) else { return };
    let dir = TempDir::new("link-down");
    let script = format!("{}; exec sleep 60", record_pid(&dir));
    let list = hosts.host_list(&[2, 2, 1]);
    let mut cmd =
        mprun(&["--host-timeout", "2", "--launcher-exec", hosts.launcher_exec(), "-H", &list, "sh", "-c", &script]);
    cmd.env("MPR_KILL_GRACE_MS", "300");
    let live = Live::start(cmd);
    let pids = dir.pids(5);
    hosts.link_down(1);
    let cut = Instant::now();
    let (code, _, err) = live.finish(Duration::from_secs(20));
    let elapsed = cut.elapsed();
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(&format!(
            "mprun: host {}: no word from its proxy for 2 s (host down or unreachable?); stopping the job",
            hosts.names[1]
        )),
        "{err}"
    );
    assert!(elapsed < Duration::from_secs(6), "mprun took {elapsed:?} to notice and stop");
    for pid in pids {
        assert!(gone(pid), "rank process {pid} is still running");
    }
    assert_eq!(hosts.wait_empty(Duration::from_secs(5)), Vec::<u32>::new(), "processes left in the namespaces");
    remove(hosts);
}
