//! The matching queues (MPI 4.1, 3.5): posted receives and unexpected messages, each kept
//! per context and per source, so that the common case (a known source and tag, or a message
//! from one) looks at one short queue instead of every entry. A global sequence number keeps
//! MPI's order across queues: a message matches the oldest posted receive it fits, whether
//! that receive names its source or takes any; a receive takes the oldest unexpected message
//! it fits, which for any source means comparing the heads of that context's queues.
//!
//! No hashing and, once the queues have grown, no allocation per message: contexts and
//! sources sit in small sorted vectors (binary search), each holding a `VecDeque`.

use std::collections::VecDeque;

/// Queues of `T` by context and source, with a wildcard-source queue per context (for
/// posted receives of any source; unexpected messages always have one).
#[derive(Debug)]
pub(super) struct Queues<T> {
    ctxs: Vec<(u32, ByCtx<T>)>,
    seq: u64,
    len: usize,
}

#[derive(Debug)]
struct ByCtx<T> {
    by_src: Vec<(u32, VecDeque<(u64, T)>)>,
    any: VecDeque<(u64, T)>,
}

/// Where an entry sits: context index, source queue (`None`: the wildcard one), position.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Slot {
    ctx: usize,
    src: Option<usize>,
    at: usize,
}

impl<T> Default for Queues<T> {
    fn default() -> Self {
        Queues { ctxs: Vec::new(), seq: 0, len: 0 }
    }
}

impl<T> Queues<T> {
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Whether no entry is queued (in any context: a context once used keeps its queues).
    #[inline(always)]
    pub(super) fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline]
    fn ctx_index(&self, ctx: u32) -> Result<usize, usize> {
        self.ctxs.binary_search_by_key(&ctx, |c| c.0)
    }

    /// Appends `item` for `(ctx, src)` (`None`: any source).
    #[inline]
    pub(super) fn push(&mut self, ctx: u32, src: Option<u32>, item: T) {
        let c = match self.ctx_index(ctx) {
            Ok(c) => c,
            Err(c) => {
                self.ctxs.insert(c, (ctx, ByCtx { by_src: Vec::new(), any: VecDeque::new() }));
                c
            }
        };
        let seq = self.seq;
        self.seq += 1;
        self.len += 1;
        let by = &mut self.ctxs[c].1;
        let q = match src {
            None => &mut by.any,
            Some(s) => match by.by_src.binary_search_by_key(&s, |q| q.0) {
                Ok(i) => &mut by.by_src[i].1,
                Err(i) => {
                    by.by_src.insert(i, (s, VecDeque::new()));
                    &mut by.by_src[i].1
                }
            },
        };
        q.push_back((seq, item));
    }

    /// The oldest entry of context `ctx` that `fits`, looking in the queue of source `src`
    /// (if given) and, where `wild` is set, in the wildcard-source queue; with `src` `None`,
    /// in every source's queue.
    #[inline]
    pub(super) fn find(&self, ctx: u32, src: Option<u32>, wild: bool, fits: impl Fn(&T) -> bool) -> Option<Slot> {
        let c = self.ctx_index(ctx).ok()?;
        let by = &self.ctxs[c].1;
        let mut best: Option<(u64, Slot)> = None;
        let mut consider = |found: Option<(u64, usize)>, s: Option<usize>| {
            if let Some((seq, at)) = found {
                if best.is_none_or(|b| seq < b.0) {
                    best = Some((seq, Slot { ctx: c, src: s, at }));
                }
            }
        };
        match src {
            Some(s) => {
                if let Ok(i) = by.by_src.binary_search_by_key(&s, |q| q.0) {
                    consider(first_fit(&by.by_src[i].1, &fits), Some(i));
                }
            }
            None => {
                for (i, (_, q)) in by.by_src.iter().enumerate() {
                    consider(first_fit(q, &fits), Some(i));
                }
            }
        }
        if wild {
            consider(first_fit(&by.any, &fits), None);
        }
        best.map(|b| b.1)
    }

    #[inline]
    pub(super) fn get(&self, s: Slot) -> &T {
        let by = &self.ctxs[s.ctx].1;
        let q = match s.src {
            Some(i) => &by.by_src[i].1,
            None => &by.any,
        };
        &q[s.at].1
    }

    /// Removes the entry at `s` (from [`Queues::find`], with no change in between).
    #[inline(always)]
    pub(super) fn take(&mut self, s: Slot) -> T {
        let by = &mut self.ctxs[s.ctx].1;
        let q = match s.src {
            Some(i) => &mut by.by_src[i].1,
            None => &mut by.any,
        };
        self.len -= 1;
        // The head (the common case: the oldest entry of its queue) without moving the rest.
        let taken = if s.at == 0 { q.pop_front() } else { q.remove(s.at) };
        taken.expect("slot from find").1
    }

    /// Removes the oldest entry of its queue for which `hit` holds, in whichever context and
    /// source queue it is (a full scan: the cancel path).
    pub(super) fn remove_where(&mut self, hit: impl Fn(&T) -> bool) -> Option<T> {
        for (_, by) in &mut self.ctxs {
            for q in std::iter::once(&mut by.any).chain(by.by_src.iter_mut().map(|(_, q)| q)) {
                if let Some(at) = q.iter().position(|(_, t)| hit(t)) {
                    self.len -= 1;
                    return q.remove(at).map(|(_, t)| t);
                }
            }
        }
        None
    }

    /// Keeps only the entries for which `keep` holds (the error paths; a full scan).
    pub(super) fn retain(&mut self, mut keep: impl FnMut(&T) -> bool) {
        let mut len = 0;
        for (_, by) in &mut self.ctxs {
            by.any.retain(|(_, t)| keep(t));
            len += by.any.len();
            for (_, q) in &mut by.by_src {
                q.retain(|(_, t)| keep(t));
                len += q.len();
            }
        }
        self.len = len;
    }
}

/// The sequence number and position of the first entry of `q` that `fits`.
#[inline(always)]
fn first_fit<T>(q: &VecDeque<(u64, T)>, fits: &impl Fn(&T) -> bool) -> Option<(u64, usize)> {
    // The head first (the common case: a stream whose receives are posted in order), without
    // the walk over the deque's two halves.
    match q.front() {
        None => None,
        Some((seq, t)) if fits(t) => Some((*seq, 0)),
        Some(_) => q.iter().enumerate().skip(1).find(|(_, (_, t))| fits(t)).map(|(at, (seq, _))| (*seq, at)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A model of MPI matching: one list in arrival order, the first that fits wins.
    #[test]
    fn the_oldest_fitting_entry_wins_across_sources_and_wildcards() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(11);
        let mut q: Queues<(Option<u32>, u32, usize)> = Queues::default();
        let mut model: Vec<(u32, Option<u32>, u32, usize)> = Vec::new();
        for n in 0..20_000 {
            let ctx = rng.gen_range(0..3) * 2;
            if rng.gen_bool(0.55) {
                let src = if rng.gen_bool(0.2) { None } else { Some(rng.gen_range(0..6)) };
                let tag = rng.gen_range(0..4);
                q.push(ctx, src, (src, tag, n));
                model.push((ctx, src, tag, n));
            } else {
                // A message (ctx, src, tag) looks for the oldest entry it fits.
                let (src, tag) = (rng.gen_range(0..6), rng.gen_range(0..4));
                let want = model.iter().position(|e| e.0 == ctx && e.1.is_none_or(|s| s == src) && e.2 == tag);
                let got = q.find(ctx, Some(src), true, |e| e.1 == tag);
                match (want, got) {
                    (None, None) => {}
                    (Some(i), Some(s)) => {
                        assert_eq!(q.get(s).2, model[i].3);
                        assert_eq!(q.take(s).2, model.remove(i).3);
                    }
                    (w, g) => panic!("model {w:?}, queues {g:?}"),
                }
            }
            assert_eq!(q.len(), model.len());
        }
    }

    #[test]
    fn any_source_compares_every_source_by_age_and_retain_keeps_the_count() {
        let mut q: Queues<&str> = Queues::default();
        q.push(0, Some(3), "a3");
        q.push(0, Some(1), "b1");
        q.push(2, Some(1), "other ctx");
        q.push(0, Some(3), "c3");
        let s = q.find(0, None, false, |_| true).unwrap();
        assert_eq!(q.take(s), "a3");
        let s = q.find(0, None, false, |t| t.ends_with('3')).unwrap();
        assert_eq!(q.get(s), &"c3");
        assert_eq!(q.find(4, None, true, |_| true), None);
        q.retain(|t| *t != "b1");
        assert_eq!(q.len(), 2);
        assert_eq!(q.find(0, Some(1), false, |_| true), None);
    }
}
