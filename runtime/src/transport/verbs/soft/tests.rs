//! The soft provider's behaviour, two devices on 127.0.0.1 in one process.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use super::super::provider::{Completion, Mr, Opcode, Provider, QpId, QpType, Remote, Sge, VerbsError, WcStatus};
use super::{SoftConfig, SoftDevice};

const LO: Ipv4Addr = Ipv4Addr::LOCALHOST;
const MIB: usize = 1 << 20;

/// Page-aligned, zeroed memory that outlives the device it is registered with (declare it
/// before the device, so that it is dropped after).
struct PageBuf {
    ptr: *mut u8,
    len: usize,
}

impl PageBuf {
    fn new(len: usize) -> PageBuf {
        let layout = Layout::from_size_align(len, 4096).unwrap();
        // SAFETY: `len` is not zero in any test.
        let ptr = unsafe { alloc_zeroed(layout) };
        assert!(!ptr.is_null());
        PageBuf { ptr, len }
    }

    fn addr(&self, off: usize) -> u64 {
        self.ptr as u64 + off as u64
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: the allocation is `len` bytes and lives as long as `self`; tests read it
        // only when no work request that writes it is outstanding.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }

    fn register(&self, dev: &mut SoftDevice) -> Mr {
        // SAFETY: every test declares the buffer before the device, so the device (and its
        // registration) is dropped first.
        unsafe { dev.register(self.ptr, self.len) }.expect("register")
    }
}

impl Drop for PageBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { dealloc(self.ptr, Layout::from_size_align(self.len, 4096).unwrap()) }
    }
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len as u64).map(|i| (i.wrapping_mul(31) ^ seed.wrapping_mul(0x9e37_79b9)).wrapping_add(i >> 8) as u8).collect()
}

fn sge(mr: &Mr, off: usize, len: usize) -> Sge {
    Sge { addr: mr.addr + off as u64, len: len as u32, lkey: mr.lkey }
}

/// Polls until `n` completions arrived; panics after `secs`.
fn wait(dev: &mut SoftDevice, n: usize, secs: f64) -> Vec<Completion> {
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let mut out = Vec::new();
    while out.len() < n {
        let want = n - out.len();
        dev.poll(&mut out, want).expect("poll");
        assert!(Instant::now() < end, "{} of {n} completions after {secs} s: {out:?}", out.len());
        if out.len() < n {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    out
}

/// Polls for `ms` and returns whatever completed.
fn drain(dev: &mut SoftDevice, ms: u64) -> Vec<Completion> {
    let end = Instant::now() + Duration::from_millis(ms);
    let mut out = Vec::new();
    loop {
        dev.poll(&mut out, 64).expect("poll");
        if Instant::now() >= end {
            return out;
        }
        std::thread::sleep(Duration::from_micros(500));
    }
}

/// Two connected devices. Fields drop in order: the devices before their memory.
struct Pair {
    a: SoftDevice,
    b: SoftDevice,
    qa: QpId,
    qb: QpId,
    ma: Mr,
    mb: Mr,
    buf_a: PageBuf,
    buf_b: PageBuf,
}

fn pair(ca: SoftConfig, cb: SoftConfig, ty: QpType, len: usize) -> Pair {
    let (buf_a, buf_b) = (PageBuf::new(len), PageBuf::new(len));
    let mut a = SoftDevice::open(ca).expect("open a");
    let mut b = SoftDevice::open(cb).expect("open b");
    let (ma, mb) = (buf_a.register(&mut a), buf_b.register(&mut b));
    let (qa, addr_a) = a.create_qp(ty).unwrap();
    let (qb, addr_b) = b.create_qp(ty).unwrap();
    a.connect(qa, &addr_b).unwrap();
    b.connect(qb, &addr_a).unwrap();
    Pair { a, b, qa, qb, ma, mb, buf_a, buf_b }
}

/// A UC device as on macOS 26.3 and later (messages of many frames); most tests here send
/// such messages.
fn uc263(addr: Ipv4Addr) -> SoftConfig {
    SoftConfig { macos: (26, 3), ..SoftConfig::new(addr) }
}

fn uc_pair(len: usize) -> Pair {
    pair(uc263(LO), uc263(LO), QpType::Uc, len)
}

fn rc_pair(len: usize) -> Pair {
    pair(SoftConfig::rc(LO), SoftConfig::rc(LO), QpType::Rc, len)
}

fn assert_status(c: &Completion, op: Opcode, status: WcStatus) {
    assert_eq!((c.op, c.status), (op, status), "{c:?}");
}

/// Sends `len` bytes from a to b and checks they arrive intact.
fn send_and_check(p: &mut Pair, len: usize, seed: u64) {
    let data = pattern(seed, len);
    p.buf_a.bytes_mut()[..len].copy_from_slice(&data);
    // A receive of the message's frames (UC needs them to match, TN3205).
    let room = (len.div_ceil(4096).max(1) * 4096).min(p.buf_b.len);
    p.b.post_recv(p.qb, 7, sge(&p.mb, 0, room)).unwrap();
    p.a.post_send(p.qa, 9, sge(&p.ma, 0, len)).unwrap();
    let sent = wait(&mut p.a, 1, 10.0);
    assert_status(&sent[0], Opcode::Send, WcStatus::Success);
    assert_eq!((sent[0].wr_id, sent[0].qp), (9, p.qa));
    let got = wait(&mut p.b, 1, 10.0);
    assert_status(&got[0], Opcode::Recv, WcStatus::Success);
    assert_eq!((got[0].wr_id, got[0].qp, got[0].byte_len as usize), (7, p.qb, len));
    assert!(p.buf_b.bytes()[..len] == data[..], "{len} B arrived corrupted");
}

#[test]
fn uc_caps_are_the_thunderbolt_device() {
    let dev = SoftDevice::open(uc263(LO)).unwrap();
    let c = dev.caps();
    assert!(!c.rc && !c.rdma_read && !c.rdma_write);
    assert_eq!((c.max_qp, c.max_mr, c.max_wr, c.max_msg, c.frame, c.align), (10, 100, 32, 16_773_120, 4096, 4096));
    assert_eq!(dev.name(), "soft-uc:127.0.0.1");
    let rc = SoftDevice::open(SoftConfig::rc(LO)).unwrap().caps();
    assert!(rc.rc && rc.rdma_read && rc.rdma_write && rc.align == 1);
}

#[test]
fn uc_as_on_macos_26_2_by_default_carries_one_frame_per_message() {
    let dev = SoftDevice::open(SoftConfig::new(LO)).unwrap();
    assert_eq!(dev.caps().max_msg, 4096);
    drop(dev);
    let mut p = pair(SoftConfig::new(LO), SoftConfig::new(LO), QpType::Uc, 1 << 16);
    send_and_check(&mut p, 4096, 1);
    // A send or a receive of more than one frame is refused at once, as librdma on 26.2.
    assert!(matches!(p.a.post_send(p.qa, 2, sge(&p.ma, 0, 4097)), Err(VerbsError::Invalid(_))));
    assert!(matches!(p.b.post_recv(p.qb, 3, sge(&p.mb, 0, 8192)), Err(VerbsError::Invalid(_))));
    send_and_check(&mut p, 100, 4);
}

#[test]
fn uc_messages_of_every_size_arrive_intact() {
    let mut p = uc_pair(MIB);
    for (i, len) in [1, 4096, 4097, MIB].into_iter().enumerate() {
        send_and_check(&mut p, len, i as u64);
    }
    send_and_check(&mut p, 0, 9);
}

#[test]
fn rc_messages_of_every_size_arrive_intact() {
    let mut p = rc_pair(MIB);
    for (i, len) in [1, 4096, 4097, MIB].into_iter().enumerate() {
        send_and_check(&mut p, len, i as u64);
    }
}

#[test]
fn uc_the_largest_message_arrives_and_a_larger_one_is_refused() {
    const MAX: usize = 16_773_120;
    let mut p = uc_pair(MAX + 4096);
    send_and_check(&mut p, MAX, 4);
    assert!(matches!(p.a.post_send(p.qa, 1, sge(&p.ma, 0, MAX + 1)), Err(VerbsError::Invalid(_))));
}

/// TN3205's credit flow control: a SEND waits for a posted receive (its sender asks the
/// receiver for credit meanwhile, and the receiver answers, so it is not taken for silent),
/// then lands in the receive when one is posted; nothing is dropped.
#[test]
fn uc_a_send_waits_for_a_posted_receive() {
    let mut p = uc_pair(1 << 16);
    p.buf_a.bytes_mut()[..100].fill(1);
    p.a.post_send(p.qa, 1, sge(&p.ma, 0, 100)).unwrap();
    // Longer than a silent peer is waited for (100 ms).
    assert!(drain(&mut p.a, 300).is_empty(), "the send went out with no receive posted");
    assert!(p.a.stats().credit_requests > 1, "{:?}", p.a.stats());
    p.b.post_recv(p.qb, 2, sge(&p.mb, 0, 4096)).unwrap();
    let got = wait(&mut p.b, 1, 5.0);
    assert_eq!((got[0].wr_id, got[0].byte_len, got[0].status), (2, 100, WcStatus::Success));
    assert!(p.buf_b.bytes()[..100].iter().all(|&b| b == 1));
    assert_status(&wait(&mut p.a, 1, 5.0)[0], Opcode::Send, WcStatus::Success);
    assert_eq!(p.b.stats().no_recv_drops, 0);
}

/// With one receive posted at a time and 30% of the frames lost, every SEND still waits for
/// its receive, and a message lost whole does not hold the next for ever: the sender's
/// request for credit says it went out, and the receive it would have taken is the next's.
#[test]
fn uc_a_message_lost_whole_gives_its_credit_back() {
    const N: usize = 120;
    let mut ca = uc263(LO);
    (ca.loss, ca.seed) = (0.3, 7);
    let mut p = pair(ca, uc263(LO), QpType::Uc, 1 << 16);
    p.b.post_recv(p.qb, 0, sge(&p.mb, 0, 4096)).unwrap();
    let (mut got, mut last) = (0usize, None);
    let t0 = Instant::now();
    let mut take = |p: &mut Pair| {
        let mut out = Vec::new();
        p.b.poll(&mut out, 4).unwrap();
        for c in out {
            assert_eq!(c.status, WcStatus::Success, "{c:?}");
            let i = p.buf_b.bytes()[0] as usize;
            assert!(last.is_none_or(|l| l < i), "message {i} after {last:?}");
            (got, last) = (got + 1, Some(i));
            p.b.post_recv(p.qb, 0, sge(&p.mb, 0, 4096)).unwrap();
        }
    };
    for i in 0..N {
        p.buf_a.bytes_mut()[..100].fill(i as u8);
        p.a.post_send(p.qa, i as u64, sge(&p.ma, 0, 100)).unwrap();
        let mut done = Vec::new();
        while done.is_empty() {
            take(&mut p);
            p.a.poll(&mut done, 1).unwrap();
            assert!(t0.elapsed() < Duration::from_secs(30), "send {i} never went out");
            std::thread::sleep(Duration::from_micros(100));
        }
        assert_status(&done[0], Opcode::Send, WcStatus::Success);
    }
    let end = Instant::now() + Duration::from_millis(200);
    while Instant::now() < end {
        take(&mut p);
    }
    let (a, b) = (p.a.stats(), p.b.stats());
    assert!(a.injected_losses > 0 && got < N && got > N / 3, "{got} of {N} arrived: {a:?}");
    assert_eq!(b.no_recv_drops, 0, "{b:?}");
    assert!(a.credit_requests > 0, "{a:?}");
}

#[test]
fn uc_the_33rd_outstanding_work_request_is_refused() {
    let mut p = uc_pair(1 << 16);
    for i in 0..32 {
        p.a.post_send(p.qa, i, sge(&p.ma, 0, 1)).unwrap();
        p.b.post_recv(p.qb, i, sge(&p.mb, 0, 1)).unwrap();
    }
    assert_eq!(p.a.post_send(p.qa, 32, sge(&p.ma, 0, 1)), Err(VerbsError::Limit("send queue")));
    assert_eq!(p.b.post_recv(p.qb, 32, sge(&p.mb, 0, 1)), Err(VerbsError::Limit("receive queue")));
    // Slots come back as completions are polled.
    let sent = wait(&mut p.a, 32, 5.0);
    assert!(sent.iter().enumerate().all(|(i, c)| c.wr_id == i as u64 && c.status == WcStatus::Success));
    p.a.post_send(p.qa, 32, sge(&p.ma, 0, 1)).unwrap();
    let got = wait(&mut p.b, 32, 5.0);
    assert!(got.iter().enumerate().all(|(i, c)| c.wr_id == i as u64 && c.status == WcStatus::Success));
}

#[test]
fn uc_device_limits_and_refusals() {
    let pages = PageBuf::new(102 * 4096);
    let mut dev = SoftDevice::open(uc263(LO)).unwrap();
    let qps: Vec<_> = (0..10).map(|_| dev.create_qp(QpType::Uc).expect("10 queue pairs")).collect();
    assert_eq!(dev.create_qp(QpType::Uc), Err(VerbsError::Limit("queue pairs")));
    dev.destroy_qp(qps[0].0).unwrap();
    dev.create_qp(QpType::Uc).expect("a freed slot");
    assert!(matches!(dev.create_qp(QpType::Rc), Err(VerbsError::Invalid(_))));

    // SAFETY: `pages` is declared before `dev`, so it outlives every registration (also below).
    let bad_addr = unsafe { dev.register(pages.ptr.add(1), 4096) };
    assert!(matches!(bad_addr, Err(VerbsError::Invalid(_))), "{bad_addr:?}");
    // SAFETY: as above.
    let bad_len = unsafe { dev.register(pages.ptr, 100) };
    assert!(matches!(bad_len, Err(VerbsError::Invalid(_))), "{bad_len:?}");
    let mrs: Vec<Mr> = (0..100)
        // SAFETY: as above.
        .map(|i| unsafe { dev.register(pages.ptr.add(i * 4096), 4096) }.expect("100 regions"))
        .collect();
    // SAFETY: as above.
    assert_eq!(unsafe { dev.register(pages.ptr.add(100 * 4096), 4096) }, Err(VerbsError::Limit("memory regions")));
    dev.deregister(mrs[5]).unwrap();
    assert!(matches!(dev.deregister(mrs[5]), Err(VerbsError::Invalid(_))));
    // SAFETY: as above.
    unsafe { dev.register(pages.ptr.add(100 * 4096), 2 * 4096) }.expect("a freed slot");

    let (q, _) = qps[1];
    let in_mr = sge(&mrs[1], 0, 16);
    // Not connected yet; then READ/WRITE and foreign memory are refused.
    assert!(matches!(dev.post_send(q, 0, in_mr), Err(VerbsError::Invalid(_))));
    let (_, peer) = qps[2];
    dev.connect(q, &peer).unwrap();
    assert!(matches!(dev.connect(q, &peer), Err(VerbsError::Invalid(_))));
    let remote = Remote { addr: mrs[2].addr, rkey: mrs[2].rkey };
    assert!(matches!(dev.post_read(q, 0, in_mr, remote), Err(VerbsError::Invalid(_))));
    assert!(matches!(dev.post_write(q, 0, in_mr, remote), Err(VerbsError::Invalid(_))));
    let outside = Sge { addr: mrs[1].addr + 4000, len: 200, lkey: mrs[1].lkey };
    assert!(matches!(dev.post_send(q, 0, outside), Err(VerbsError::Invalid(_))));
    let wrong_key = Sge { lkey: mrs[2].lkey, ..in_mr };
    assert!(matches!(dev.post_recv(q, 0, wrong_key), Err(VerbsError::Invalid(_))));
    let freed = sge(&mrs[5], 0, 16);
    assert!(matches!(dev.post_send(q, 0, freed), Err(VerbsError::Invalid(_))));
    dev.post_send(q, 0, in_mr).unwrap();
}

#[test]
fn uc_a_receive_too_small_completes_with_local_length() {
    let mut p = uc_pair(1 << 16);
    p.b.post_recv(p.qb, 1, sge(&p.mb, 0, 4096)).unwrap();
    p.a.post_send(p.qa, 1, sge(&p.ma, 0, 8192)).unwrap();
    let got = wait(&mut p.b, 1, 5.0);
    assert_eq!((got[0].wr_id, got[0].status), (1, WcStatus::LocalLength));
    assert_status(&wait(&mut p.a, 1, 5.0)[0], Opcode::Send, WcStatus::Success);
    send_and_check(&mut p, 8192, 3);

    // RC: the same, and the queue pair goes on.
    let mut p = rc_pair(1 << 16);
    p.b.post_recv(p.qb, 1, sge(&p.mb, 0, 4096)).unwrap();
    p.a.post_send(p.qa, 1, sge(&p.ma, 0, 8192)).unwrap();
    let got = wait(&mut p.b, 1, 5.0);
    assert_eq!((got[0].wr_id, got[0].status), (1, WcStatus::LocalLength));
    assert_status(&wait(&mut p.a, 1, 5.0)[0], Opcode::Send, WcStatus::Success);
    send_and_check(&mut p, 8192, 3);
}

/// TN3205: a SEND must span as many 4 KiB frames as the receive it lands in. On UC a
/// shorter one fails that receive (and only it); RC, a Linux NIC's, takes it.
#[test]
fn uc_a_send_of_fewer_frames_than_its_receive_fails_it() {
    let mut p = uc_pair(1 << 16);
    p.b.post_recv(p.qb, 1, sge(&p.mb, 0, 8192)).unwrap();
    p.a.post_send(p.qa, 1, sge(&p.ma, 0, 100)).unwrap();
    let got = wait(&mut p.b, 1, 5.0);
    assert_eq!((got[0].wr_id, got[0].status), (1, WcStatus::LocalLength));
    assert_eq!(p.b.stats().failed_recvs, 1);
    // The sender's request succeeds: UC tells the sender nothing.
    assert_status(&wait(&mut p.a, 1, 5.0)[0], Opcode::Send, WcStatus::Success);
    // The same frames (4097..=8192 bytes into 8192) pass.
    send_and_check(&mut p, 8192, 3);
    p.b.post_recv(p.qb, 2, sge(&p.mb, 0, 8192)).unwrap();
    p.a.post_send(p.qa, 2, sge(&p.ma, 0, 4097)).unwrap();
    let got = wait(&mut p.b, 1, 5.0);
    assert_eq!((got[0].wr_id, got[0].status, got[0].byte_len), (2, WcStatus::Success, 4097));
    assert_eq!(p.b.stats().failed_recvs, 1);

    let mut p = rc_pair(1 << 16);
    p.b.post_recv(p.qb, 1, sge(&p.mb, 0, 8192)).unwrap();
    p.a.post_send(p.qa, 1, sge(&p.ma, 0, 100)).unwrap();
    let got = wait(&mut p.b, 1, 5.0);
    assert_eq!((got[0].wr_id, got[0].status, got[0].byte_len), (1, WcStatus::Success, 100));
}

#[test]
fn uc_loss_drops_whole_messages_and_never_corrupts_one() {
    const N: usize = 300;
    const SLOT: usize = 5 * 4096;
    const SLOTS: usize = 16;
    // Every message spans the receives' five frames (TN3205), its length within the last.
    let len_of = |i: usize| SLOT - 4095 + (i * 7919) % 4096;
    let mut ca = uc263(LO);
    (ca.loss, ca.seed) = (0.05, 42);
    let mut p = pair(ca, uc263(LO), QpType::Uc, SLOTS * SLOT);
    for s in 0..SLOTS {
        p.buf_b.bytes_mut()[s * SLOT..(s + 1) * SLOT].fill(0xee);
        p.b.post_recv(p.qb, s as u64, sge(&p.mb, s * SLOT, SLOT)).unwrap();
    }
    let mut received = Vec::new();
    let mut check = |p: &mut Pair, cs: Vec<Completion>| {
        for c in cs {
            assert_eq!(c.status, WcStatus::Success, "{c:?}");
            let s = c.wr_id as usize;
            let got = &p.buf_b.bytes()[s * SLOT..s * SLOT + c.byte_len as usize];
            let i = u16::from_le_bytes([got[0], *got.get(1).unwrap_or(&0)]) as usize;
            let want = [&(i as u16).to_le_bytes()[..], &pattern(i as u64, len_of(i))[2.min(len_of(i))..]].concat();
            assert_eq!(c.byte_len as usize, len_of(i), "message {i} arrived with a wrong length");
            assert!(got == &want[..len_of(i)], "message {i} arrived corrupted");
            assert!(received.last().is_none_or(|&last| last < i), "message {i} out of order");
            received.push(i);
            p.buf_b.bytes_mut()[s * SLOT..(s + 1) * SLOT].fill(0xee);
            p.b.post_recv(p.qb, s as u64, sge(&p.mb, s * SLOT, SLOT)).unwrap();
        }
    };
    for i in 0..N {
        let len = len_of(i);
        let mut msg = pattern(i as u64, len);
        msg[..2.min(len)].copy_from_slice(&(i as u16).to_le_bytes()[..2.min(len)]);
        p.buf_a.bytes_mut()[..len].copy_from_slice(&msg);
        p.a.post_send(p.qa, i as u64, sge(&p.ma, 0, len)).unwrap();
        assert_status(&wait(&mut p.a, 1, 5.0)[0], Opcode::Send, WcStatus::Success);
        // Let the receiver catch up so that drops come from loss, not missing receives.
        std::thread::sleep(Duration::from_micros(300));
        let cs = drain(&mut p.b, 0);
        check(&mut p, cs);
    }
    let cs = drain(&mut p.b, 200);
    check(&mut p, cs);
    let stats = (p.a.stats(), p.b.stats());
    assert!(stats.0.injected_losses > 0);
    assert!(received.len() < N && received.len() > N / 2, "{} of {N} arrived; {stats:?}", received.len());
    assert!(stats.1.incomplete_drops > 0, "{stats:?}");
}

#[test]
fn rc_read_and_write_move_the_right_bytes_without_the_target() {
    let mut p = rc_pair(2 * MIB);
    let data = pattern(1, MIB + 123);
    p.buf_a.bytes_mut()[..data.len()].copy_from_slice(&data);
    let remote = |off: usize| Remote { addr: p.mb.addr + off as u64, rkey: p.mb.rkey };
    // The target (b) never polls.
    p.a.post_write(p.qa, 1, sge(&p.ma, 0, 10_000), remote(100)).unwrap();
    p.a.post_write(p.qa, 2, sge(&p.ma, 0, data.len()), remote(MIB / 2 + 3)).unwrap();
    let done = wait(&mut p.a, 2, 10.0);
    assert!(done.iter().all(|c| c.op == Opcode::Write && c.status == WcStatus::Success), "{done:?}");
    assert_eq!((done[0].wr_id, done[1].wr_id), (1, 2));
    assert!(p.buf_b.bytes()[100..10_100] == data[..10_000]);
    assert!(p.buf_b.bytes()[MIB / 2 + 3..MIB / 2 + 3 + data.len()] == data[..]);
    assert!(p.buf_b.bytes()[..100].iter().all(|&b| b == 0));

    let theirs = pattern(2, 2 * MIB);
    p.buf_b.bytes_mut().copy_from_slice(&theirs);
    p.a.post_read(p.qa, 3, sge(&p.ma, 50_000, 9000), remote(5000)).unwrap();
    p.a.post_read(p.qa, 4, sge(&p.ma, 0, 0), remote(0)).unwrap();
    p.a.post_read(p.qa, 5, sge(&p.ma, MIB, MIB), remote(MIB)).unwrap();
    let done = wait(&mut p.a, 3, 10.0);
    assert!(done.iter().all(|c| c.op == Opcode::Read && c.status == WcStatus::Success), "{done:?}");
    assert_eq!(done.iter().map(|c| c.wr_id).collect::<Vec<_>>(), [3, 4, 5]);
    assert!(p.buf_a.bytes()[50_000..59_000] == theirs[5000..14_000]);
    assert!(p.buf_a.bytes()[MIB..] == theirs[MIB..]);
    assert!(p.b.poll(&mut Vec::new(), 16).unwrap() == 0);
}

#[test]
fn rc_out_of_bounds_is_a_remote_access_error() {
    let mut p = rc_pair(1 << 16);
    let len = p.buf_b.len;
    let past_end = Remote { addr: p.mb.addr + len as u64 - 10, rkey: p.mb.rkey };
    p.a.post_write(p.qa, 1, sge(&p.ma, 0, 4096), past_end).unwrap();
    assert_status(&wait(&mut p.a, 1, 5.0)[0], Opcode::Write, WcStatus::RemoteAccess);
    assert!(p.buf_b.bytes().iter().all(|&b| b == 0), "a refused write left bytes behind");
    // The queue pair failed: what comes later is flushed.
    p.a.post_send(p.qa, 2, sge(&p.ma, 0, 1)).unwrap();
    assert_status(&wait(&mut p.a, 1, 5.0)[0], Opcode::Send, WcStatus::Flushed);

    let mut p = rc_pair(1 << 16);
    let bad_key = Remote { addr: p.mb.addr, rkey: p.mb.rkey ^ 1 };
    p.a.post_read(p.qa, 1, sge(&p.ma, 0, 64), bad_key).unwrap();
    assert_status(&wait(&mut p.a, 1, 5.0)[0], Opcode::Read, WcStatus::RemoteAccess);
    let mut p = rc_pair(1 << 16);
    let lkey_is_not_an_rkey = Remote { addr: p.mb.addr, rkey: p.mb.lkey };
    p.a.post_read(p.qa, 1, sge(&p.ma, 0, 64), lkey_is_not_an_rkey).unwrap();
    assert_status(&wait(&mut p.a, 1, 5.0)[0], Opcode::Read, WcStatus::RemoteAccess);
}

#[test]
fn rc_a_send_waits_for_its_receive() {
    let mut p = rc_pair(1 << 16);
    p.buf_a.bytes_mut()[..5000].copy_from_slice(&pattern(5, 5000));
    p.a.post_send(p.qa, 1, sge(&p.ma, 0, 5000)).unwrap();
    assert!(drain(&mut p.a, 30).is_empty(), "completed before the receiver was ready");
    assert!(p.b.stats().rnr_refused > 0);
    p.b.post_recv(p.qb, 1, sge(&p.mb, 0, 8192)).unwrap();
    assert_status(&wait(&mut p.b, 1, 5.0)[0], Opcode::Recv, WcStatus::Success);
    assert_status(&wait(&mut p.a, 1, 5.0)[0], Opcode::Send, WcStatus::Success);
    assert!(p.buf_b.bytes()[..5000] == pattern(5, 5000)[..]);
}

#[test]
fn rc_with_loss_every_message_arrives_in_order() {
    const N: usize = 200;
    const SLOT: usize = 3 * 4096;
    const SLOTS: usize = 16;
    let len_of = |i: usize| 1 + (i * 4999) % SLOT;
    let mut ca = SoftConfig::rc(LO);
    (ca.loss, ca.seed) = (0.05, 7);
    let mut cb = SoftConfig::rc(LO);
    (cb.loss, cb.seed) = (0.05, 8);
    let mut p = pair(ca, cb, QpType::Rc, SLOTS * SLOT);
    for s in 0..SLOTS {
        p.b.post_recv(p.qb, s as u64, sge(&p.mb, s * SLOT, SLOT)).unwrap();
    }
    // Each message is sent from its own slot of a's memory, up to 8 in flight.
    let (mut next, mut sent, mut got) = (0, 0, 0);
    let end = Instant::now() + Duration::from_secs(60);
    while got < N {
        assert!(Instant::now() < end, "{got} of {N} arrived; {:?} {:?}", p.a.stats(), p.b.stats());
        while next < N && next - sent < 8 {
            let s = next % SLOTS;
            let len = len_of(next);
            p.buf_a.bytes_mut()[s * SLOT..s * SLOT + len].copy_from_slice(&pattern(next as u64, len));
            p.a.post_send(p.qa, next as u64, sge(&p.ma, s * SLOT, len)).unwrap();
            next += 1;
        }
        let mut cs = Vec::new();
        p.a.poll(&mut cs, 16).unwrap();
        for c in cs {
            assert_eq!((c.wr_id, c.status), (sent as u64, WcStatus::Success));
            sent += 1;
        }
        let mut cs = Vec::new();
        p.b.poll(&mut cs, 16).unwrap();
        for c in cs {
            assert_eq!(c.status, WcStatus::Success);
            let s = c.wr_id as usize;
            assert_eq!(s, got % SLOTS, "receives complete in order");
            let len = len_of(got);
            assert_eq!(c.byte_len as usize, len);
            assert!(p.buf_b.bytes()[s * SLOT..s * SLOT + len] == pattern(got as u64, len)[..], "message {got}");
            got += 1;
            p.b.post_recv(p.qb, s as u64, sge(&p.mb, s * SLOT, SLOT)).unwrap();
        }
        std::thread::sleep(Duration::from_micros(100));
    }
    let stats = (p.a.stats(), p.b.stats());
    assert!(stats.0.injected_losses > 0 && stats.0.retransmits > 0, "{stats:?}");
}

#[test]
fn rc_a_dead_peer_exceeds_the_retries_within_the_bound() {
    let bound = Duration::from_millis(500);
    let mut ca = SoftConfig::rc(LO);
    ca.retry_timeout = bound;
    let mut p = pair(ca, SoftConfig::rc(LO), QpType::Rc, 1 << 16);
    send_and_check(&mut p, 100, 1);
    let Pair { mut a, b, qa, ma, .. } = p;
    drop(b);
    let t0 = Instant::now();
    a.post_send(qa, 1, sge(&ma, 0, 100)).unwrap();
    a.post_send(qa, 2, sge(&ma, 0, 100)).unwrap();
    let done = wait(&mut a, 2, 5.0);
    let took = t0.elapsed();
    assert_eq!((done[0].wr_id, done[0].status), (1, WcStatus::RetryExceeded));
    assert_eq!((done[1].wr_id, done[1].status), (2, WcStatus::Flushed));
    assert!(took >= bound && took < bound + Duration::from_millis(300), "took {took:?}");
    a.post_send(qa, 3, sge(&ma, 0, 1)).unwrap();
    assert_status(&wait(&mut a, 1, 5.0)[0], Opcode::Send, WcStatus::Flushed);
}

#[test]
fn uc_sends_to_a_dead_peer_just_complete() {
    let p = uc_pair(1 << 16);
    let Pair { mut a, b, qa, ma, .. } = p;
    drop(b);
    let t0 = Instant::now();
    for round in 0..4 {
        for i in 0..16 {
            a.post_send(qa, round * 16 + i, sge(&ma, 0, 1 << 16)).unwrap();
        }
        let done = wait(&mut a, 16, 5.0);
        assert!(done.iter().all(|c| c.status == WcStatus::Success), "{done:?}");
    }
    assert!(t0.elapsed() < Duration::from_secs(2), "took {:?}", t0.elapsed());
}

#[test]
fn dropping_the_device_releases_its_ports() {
    let mut dev = SoftDevice::open(SoftConfig::rc(LO)).unwrap();
    let ports: Vec<u16> = (0..3).map(|_| dev.create_qp(QpType::Rc).unwrap().1.qpn as u16).collect();
    for &port in &ports {
        assert!(std::net::UdpSocket::bind((LO, port)).is_err(), "port {port} is not in use");
    }
    drop(dev);
    for port in ports {
        std::net::UdpSocket::bind((LO, port)).unwrap_or_else(|e| panic!("port {port} still bound: {e}"));
    }
}

#[test]
fn queue_pair_addresses_are_the_interface_and_port() {
    let mut dev = SoftDevice::open(uc263(LO)).unwrap();
    let (_, addr) = dev.create_qp(QpType::Uc).unwrap();
    assert_eq!(addr.lid, 0);
    assert_eq!(addr.gid, LO.to_ipv6_mapped().octets());
    assert!(addr.qpn > 0 && addr.qpn <= u16::MAX as u32 && addr.psn < 1 << 24);
    assert!(matches!(SoftDevice::open(SoftConfig { loss: 1.0, ..uc263(LO) }), Err(VerbsError::Invalid(_))));
    let mut unspecified = addr;
    unspecified.gid = [0; 16];
    let (q, _) = dev.create_qp(QpType::Uc).unwrap();
    assert!(matches!(dev.connect(q, &unspecified), Err(VerbsError::Invalid(_))));
}

/// On an interface a UC device is a Thunderbolt port: its queue pairs and regions count with
/// every other device opened on that interface of the host (other processes' too), and a
/// device that goes gives its share back.
#[test]
fn uc_on_an_interface_counts_queue_pairs_across_the_host() {
    let iface = format!("mprtest{}", std::process::id());
    let small = |qp, mr| SoftConfig {
        limits: Some(super::SoftLimits { max_qp: qp, max_mr: mr, max_wr: 32, max_msg: 4096 }),
        ..SoftConfig::new(LO)
    };
    let mut a = SoftDevice::open(small(3, 4)).unwrap().on_iface(&iface).unwrap();
    let mut b = SoftDevice::open(small(3, 4)).unwrap().on_iface(&iface).unwrap();
    let qa = a.create_qp(QpType::Uc).unwrap().0;
    a.create_qp(QpType::Uc).unwrap();
    b.create_qp(QpType::Uc).unwrap();
    // Each device holds fewer than 3, the host 3: the fourth is refused.
    assert_eq!(b.create_qp(QpType::Uc), Err(VerbsError::Limit("queue pairs (counted across the host's processes)")));
    a.destroy_qp(qa).unwrap();
    b.create_qp(QpType::Uc).unwrap();
    // Regions likewise.
    let bufs: Vec<PageBuf> = (0..5).map(|_| PageBuf::new(4096)).collect();
    for buf in &bufs[..2] {
        buf.register(&mut a);
    }
    for buf in &bufs[2..4] {
        buf.register(&mut b);
    }
    // SAFETY: the buffer outlives the device's use of it (the call fails).
    let fifth = unsafe { b.register(bufs[4].ptr, 4096) };
    assert_eq!(fifth, Err(VerbsError::Limit("memory regions (counted across the host's processes)")));
    // A device that goes frees its share; the last one removes the count.
    drop(a);
    b.create_qp(QpType::Uc).unwrap();
    drop(b);
    let files: Vec<String> = std::fs::read_dir("/dev/shm")
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(&iface))
        .collect();
    assert!(files.is_empty(), "{files:?}");
    // Without an interface each device counts alone (a Mac of its own).
    let mut c = SoftDevice::open(small(3, 4)).unwrap();
    let mut d = SoftDevice::open(small(3, 4)).unwrap();
    for _ in 0..3 {
        c.create_qp(QpType::Uc).unwrap();
        d.create_qp(QpType::Uc).unwrap();
    }
}

/// The UC device's GID table is a Thunderbolt port's: fe80::, the 169.254 address macOS
/// gives the interface, then the IPv4 address at index 2 (not 1). Queue pairs publish the
/// IPv4 one, as the real provider chooses; forced to index 1 (the 169.254 address, which MLX
/// fell back to), the peer's RTR fails as on the hardware; an index past the table is
/// refused; an address that is link-local only leaves nothing to choose.
#[test]
fn uc_gid_table_is_a_thunderbolt_ports_and_a_link_local_gid_fails_rtr() {
    let cfg = SoftConfig::new(LO);
    let table = cfg.gid_table();
    assert_eq!(table.len(), 3);
    assert_eq!(&table[0][..2], &[0xfe, 0x80]);
    assert_eq!(super::super::fabric::gid_ipv4(&table[1]).map(|ip| ip.octets()[..2].to_vec()), Some(vec![169, 254]));
    assert_eq!(table[2], LO.to_ipv6_mapped().octets());
    let mut good = SoftDevice::open(cfg).unwrap();
    let (qg, addr_g) = good.create_qp(QpType::Uc).unwrap();
    assert_eq!(addr_g.gid, table[2]);
    let mut forced = SoftDevice::open(SoftConfig { gid_index: Some(1), ..cfg }).unwrap();
    let (qf, addr_f) = forced.create_qp(QpType::Uc).unwrap();
    assert_eq!(addr_f.gid, table[1]);
    let e = good.connect(qg, &addr_f).unwrap_err().to_string();
    assert!(e.contains("RTR") && e.contains("169.254."), "{e}");
    assert!(forced.connect(qf, &addr_g).is_ok(), "the forced side may reach a routable GID");
    let e = SoftDevice::open(SoftConfig { gid_index: Some(3), ..cfg }).unwrap_err().to_string();
    assert!(e.contains("GID index 3: the device's table has 3 entries"), "{e}");
    let e = SoftConfig::new(std::net::Ipv4Addr::new(169, 254, 7, 9)).gid().unwrap_err().to_string();
    assert!(e.contains("has no IPv4 address but link-local ones") && e.contains("169.254.7.9"), "{e}");
    // A RoCE NIC's table: fe80::, then the IPv4 address, chosen.
    let rc = SoftConfig::rc(LO);
    assert_eq!(rc.gid_table().len(), 2);
    assert_eq!(rc.gid().unwrap(), LO.to_ipv6_mapped().octets());
}
