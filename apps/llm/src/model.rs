//! A Llama-architecture model over its GGUF weights, split by tensor parallelism across the
//! ranks of a communicator (Megatron's scheme): each rank holds a contiguous range of the
//! query heads (uneven ranges allowed) and the key/value heads those read (so a KV head is
//! replicated where ranks share it, as when there are fewer KV heads than ranks), a range of
//! the feed-forward rows (in whole blocks), and a range of the vocabulary. Q, K, V, gate and
//! up are split by output rows; O and down by input columns, each followed by one all-reduce
//! of the partial sums. Weights stay as the file stores them (quantized): the row-split ones
//! memory-mapped, a rank touching only its own rows; O's and down's columns copied out of the
//! file (their rows are shorter than a page, so through the map every rank would touch all of
//! them). Pipeline stages hold contiguous ranges of the layers; the
//! caller passes the activations between them.

use std::ops::Range;

use mpr::{Comm, Error, Sum};

use crate::gguf::Gguf;
use crate::quant::Mat;
use crate::weights::{Tensor, Weights};

/// The model's shape, from its metadata.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) dim: usize,
    pub(crate) layers: usize,
    pub(crate) heads: usize,
    pub(crate) kv_heads: usize,
    pub(crate) head_dim: usize,
    pub(crate) ffn: usize,
    pub(crate) vocab: usize,
    pub(crate) eps: f32,
    pub(crate) rope_base: f32,
    pub(crate) ctx: usize,
    pub(crate) rope: RopePairs,
}

/// Which of a head's dimensions RoPE rotates together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RopePairs {
    /// 2i and 2i+1: GGUF, whose converters permute the Q and K rows for it.
    Adjacent,
    /// i and i + head_dim/2: Hugging Face's rotate-half.
    Halves,
}

impl Config {
    pub(crate) fn from_gguf(g: &Gguf) -> Result<Config, String> {
        let arch = g.string("general.architecture")?;
        if arch != "llama" {
            return Err(format!("general.architecture = {arch:?}: mpr-llm runs Llama-architecture models"));
        }
        let k = |s: &str| format!("{arch}.{s}");
        let dim = g.uint(&k("embedding_length"))?;
        let heads = g.uint(&k("attention.head_count"))?;
        let kv_heads = g.uint(&k("attention.head_count_kv")).unwrap_or(heads);
        if heads == 0 || dim % heads != 0 {
            return Err(format!("{heads} query heads do not divide the width {dim}"));
        }
        let head_dim = dim / heads;
        if let Ok(rot) = g.uint(&k("rope.dimension_count")) {
            if rot != head_dim {
                return Err(format!("RoPE over {rot} of {head_dim} dimensions per head: not implemented"));
            }
        }
        let vocab = match g.uint(&k("vocab_size")) {
            Ok(v) => v,
            Err(_) => g.tensor("token_embd.weight")?.dims[1],
        };
        Config::checked(Config {
            dim,
            layers: g.uint(&k("block_count"))?,
            heads,
            kv_heads,
            head_dim,
            ffn: g.uint(&k("feed_forward_length"))?,
            vocab,
            eps: g.float(&k("attention.layer_norm_rms_epsilon"))? as f32,
            rope_base: g.float(&k("rope.freq_base")).unwrap_or(10000.0) as f32,
            ctx: g.uint(&k("context_length")).unwrap_or(2048),
            rope: RopePairs::Adjacent,
        })
    }

    /// `c` if its shape holds together.
    pub(crate) fn checked(c: Config) -> Result<Config, String> {
        if c.heads == 0 || c.kv_heads == 0 || !c.heads.is_multiple_of(c.kv_heads) {
            return Err(format!("{} query heads cannot share {} key/value heads", c.heads, c.kv_heads));
        }
        if c.head_dim == 0 || !c.head_dim.is_multiple_of(2) || c.layers == 0 || c.dim == 0 || c.ffn == 0 || c.vocab == 0
        {
            return Err(format!("a model of this shape cannot run: {c:?}"));
        }
        // Every buffer the forward pass sizes from the shape holds at most `ctx` tokens (longer
        // prompts are refused first) of at most the widest of these, in f32: checked here, the
        // products the code forms from them cannot wrap.
        let wide = [
            ("the query width (heads x head dimension)", c.heads.checked_mul(c.head_dim)),
            ("the key/value width", c.kv_heads.checked_mul(c.head_dim)),
            ("the width", Some(c.dim)),
            ("the feed-forward width", Some(c.ffn)),
            ("the vocabulary", Some(c.vocab)),
        ];
        for (what, n) in wide {
            let bytes = n.and_then(|n| n.checked_mul(c.ctx.max(1))).and_then(|n| n.checked_mul(4));
            if bytes.is_none_or(|b| b > isize::MAX as usize) {
                return Err(format!(
                    "a model of this shape cannot run: {what} over a context of {} tokens does not fit in memory",
                    c.ctx
                ));
            }
        }
        Ok(c)
    }
}

/// `n` units split into `parts` contiguous ranges as even as they go; range `i`.
fn split(n: usize, parts: usize, i: usize) -> Range<usize> {
    let (base, extra) = (n / parts, n % parts);
    let start = i * base + i.min(extra);
    start..start + base + usize::from(i < extra)
}

/// What one rank of a tensor-parallel group holds.
#[derive(Debug, Clone)]
pub(crate) struct Shard {
    /// This pipeline stage's layers.
    pub(crate) layers: Range<usize>,
    /// Query heads.
    pub(crate) heads: Range<usize>,
    /// Key/value heads the query heads read.
    pub(crate) kv: Range<usize>,
    /// Feed-forward rows (whole blocks of 32).
    pub(crate) ffn: Range<usize>,
    /// Vocabulary rows of the output projection.
    pub(crate) vocab: Range<usize>,
}

impl Shard {
    /// Tensor-parallel rank `rank` of `size`, in pipeline stage `stage` of `stages`.
    pub(crate) fn new(cfg: &Config, rank: usize, size: usize, stage: usize, stages: usize) -> Result<Shard, String> {
        if stages > cfg.layers {
            return Err(format!("{stages} pipeline stages, but the model has only {} layers", cfg.layers));
        }
        if size > cfg.heads {
            return Err(format!(
                "{size} ranks of tensor parallelism, but the model has only {} query heads",
                cfg.heads
            ));
        }
        let heads = split(cfg.heads, size, rank);
        let group = cfg.heads / cfg.kv_heads;
        let kv = heads.start / group..(heads.end - 1) / group + 1;
        let blocks = split(cfg.ffn / 32, size, rank);
        let ffn =
            if cfg.ffn.is_multiple_of(32) { blocks.start * 32..blocks.end * 32 } else { split(cfg.ffn, size, rank) };
        Ok(Shard { layers: split(cfg.layers, stages, stage), heads, kv, ffn, vocab: split(cfg.vocab, size, rank) })
    }
}

#[derive(Debug)]
struct Layer {
    attn_norm: Vec<f32>,
    ffn_norm: Vec<f32>,
    q: Mat,
    k: Mat,
    v: Mat,
    o: Mat,
    gate: Mat,
    up: Mat,
    down: Mat,
}

/// The model as this rank holds it.
#[derive(Debug)]
pub(crate) struct Model<'a> {
    pub(crate) cfg: Config,
    pub(crate) shard: Shard,
    embd: Tensor<'a>,
    output: Mat,
    out_norm: Vec<f32>,
    layers: Vec<Layer>,
}

/// The keys and values seen so far, per layer: position-major, this rank's KV heads.
#[derive(Debug, Default)]
pub(crate) struct Cache {
    k: Vec<Vec<f32>>,
    v: Vec<Vec<f32>>,
    pub(crate) len: usize,
}

/// All-reduces done and the time they took.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct CommStats {
    pub(crate) allreduces: usize,
    pub(crate) secs: f64,
}

fn rms_norm(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let ms = x.iter().map(|v| v * v).sum::<f32>() / x.len() as f32;
    let s = 1.0 / (ms + eps).sqrt();
    for ((o, &v), &w) in out.iter_mut().zip(x).zip(w) {
        *o = v * s * w;
    }
}

/// RoPE on each head of `x`, over the pairs `pairs` says: the angles are worked out once
/// for all the heads.
fn rope(x: &mut [f32], head_dim: usize, pos: usize, base: f32, pairs: RopePairs) {
    let half = head_dim / 2;
    let angles: Vec<(f32, f32)> =
        (0..half).map(|i| (pos as f32 * base.powf(-2.0 * i as f32 / head_dim as f32)).sin_cos()).collect();
    for head in x.chunks_exact_mut(head_dim) {
        for (i, &(s, c)) in angles.iter().enumerate() {
            let (ia, ib) = match pairs {
                RopePairs::Adjacent => (2 * i, 2 * i + 1),
                RopePairs::Halves => (i, i + half),
            };
            let (a, b) = (head[ia], head[ib]);
            head[ia] = a * c - b * s;
            head[ib] = a * s + b * c;
        }
    }
}

impl<'a> Model<'a> {
    pub(crate) fn load(g: &'a Weights, cfg: Config, shard: Shard) -> Result<Model<'a>, String> {
        let (d, hd) = (cfg.dim, cfg.head_dim);
        let embd = g.tensor("token_embd.weight", cfg.vocab, d)?;
        // A model without its own output projection ties it to the embedding. The last stage
        // alone holds it, each rank its range of the vocabulary.
        let name = if g.has("output.weight") { "output.weight" } else { "token_embd.weight" };
        let vocab = if shard.layers.end == cfg.layers { shard.vocab.clone() } else { 0..0 };
        let output = g.rows(name, cfg.vocab, d, vocab)?;
        let mut layers = Vec::with_capacity(shard.layers.len());
        // Q, K, V, gate and up: this rank's rows, mapped. O and down are split by columns:
        // this rank's copied out (see Weights::columns).
        let (qr, kvr, f) =
            (shard.heads.start * hd..shard.heads.end * hd, shard.kv.start * hd..shard.kv.end * hd, shard.ffn.clone());
        for l in shard.layers.clone() {
            let n = |s: &str| format!("blk.{l}.{s}.weight");
            layers.push(Layer {
                attn_norm: g.vector(&n("attn_norm"), d)?,
                ffn_norm: g.vector(&n("ffn_norm"), d)?,
                q: g.rows(&n("attn_q"), cfg.heads * hd, d, qr.clone())?,
                k: g.rows(&n("attn_k"), cfg.kv_heads * hd, d, kvr.clone())?,
                v: g.rows(&n("attn_v"), cfg.kv_heads * hd, d, kvr.clone())?,
                o: g.columns(&n("attn_output"), d, cfg.heads * hd, qr.clone())?,
                gate: g.rows(&n("ffn_gate"), cfg.ffn, d, f.clone())?,
                up: g.rows(&n("ffn_up"), cfg.ffn, d, f.clone())?,
                down: g.columns(&n("ffn_down"), d, cfg.ffn, f.clone())?,
            });
        }
        let out_norm = g.vector("output_norm.weight", d)?;
        Ok(Model { cfg, shard, embd, output, out_norm, layers })
    }

    /// Bytes of weights this rank holds (its shard).
    pub(crate) fn shard_bytes(&self) -> usize {
        let layers: usize = self
            .layers
            .iter()
            .map(|l| [&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down].iter().map(|m| m.bytes()).sum::<usize>())
            .sum();
        layers + self.output.bytes()
    }

    pub(crate) fn new_cache(&self) -> Cache {
        Cache { k: vec![Vec::new(); self.layers.len()], v: vec![Vec::new(); self.layers.len()], len: 0 }
    }

    fn allreduce(comm: &Comm, buf: &mut [f32], stats: &mut CommStats) -> Result<(), Error> {
        if comm.size() > 1 {
            let t0 = mpr::wtime();
            comm.allreduce_in_place(buf, Sum)?;
            stats.secs += mpr::wtime() - t0;
            stats.allreduces += 1;
        }
        Ok(())
    }

    /// The embeddings of `tokens`, a row each.
    pub(crate) fn embed(&self, tokens: &[u32]) -> Result<Vec<f32>, String> {
        let mut x = Vec::with_capacity(tokens.len() * self.cfg.dim);
        for &t in tokens {
            x.extend(self.embd.row(t as usize)?);
        }
        Ok(x)
    }

    /// This stage's layers over `x` (a row per token, at positions cache.len..), in place.
    pub(crate) fn layers(
        &self,
        comm: &Comm,
        cache: &mut Cache,
        x: &mut [f32],
        stats: &mut CommStats,
    ) -> Result<(), Error> {
        let cfg = &self.cfg;
        let (d, hd) = (cfg.dim, cfg.head_dim);
        let t_n = x.len() / d;
        let s = &self.shard;
        let (nh, nkv) = (s.heads.len(), s.kv.len());
        let group = cfg.heads / cfg.kv_heads;
        let pos0 = cache.len;
        let mut h = vec![0.0; t_n * d];
        let (nq, nk) = (nh * hd, nkv * hd);
        let mut q = vec![0.0; t_n * nh * hd];
        let mut k = vec![0.0; t_n * nkv * hd];
        let mut v = vec![0.0; t_n * nkv * hd];
        let mut att = vec![0.0; t_n * nh * hd];
        let mut o = vec![0.0; t_n * d];
        let nf = s.ffn.len();
        let mut gate = vec![0.0; t_n * nf];
        let mut up = vec![0.0; t_n * nf];
        let scale = 1.0 / (hd as f32).sqrt();
        for (li, l) in self.layers.iter().enumerate() {
            for t in 0..t_n {
                rms_norm(&x[t * d..(t + 1) * d], &l.attn_norm, cfg.eps, &mut h[t * d..(t + 1) * d]);
            }
            l.q.matmul(0..nq, 0..d, &h, &mut q);
            l.k.matmul(0..nk, 0..d, &h, &mut k);
            l.v.matmul(0..nk, 0..d, &h, &mut v);
            for t in 0..t_n {
                rope(&mut q[t * nh * hd..(t + 1) * nh * hd], hd, pos0 + t, cfg.rope_base, cfg.rope);
                rope(&mut k[t * nkv * hd..(t + 1) * nkv * hd], hd, pos0 + t, cfg.rope_base, cfg.rope);
            }
            cache.k[li].extend_from_slice(&k);
            cache.v[li].extend_from_slice(&v);
            let (kc, vc) = (&cache.k[li], &cache.v[li]);
            crate::quant::vectorized(|| {
                let mut scores = vec![0.0f32; pos0 + t_n];
                for t in 0..t_n {
                    let upto = pos0 + t + 1;
                    for hh in 0..nh {
                        let g = (s.heads.start + hh) / group - s.kv.start;
                        let qv = &q[(t * nh + hh) * hd..(t * nh + hh + 1) * hd];
                        let mut max = f32::MIN;
                        for (p, sc) in scores[..upto].iter_mut().enumerate() {
                            let kv = &kc[(p * nkv + g) * hd..(p * nkv + g + 1) * hd];
                            *sc = qv.iter().zip(kv).map(|(a, b)| a * b).sum::<f32>() * scale;
                            max = max.max(*sc);
                        }
                        let mut sum = 0.0;
                        for sc in &mut scores[..upto] {
                            *sc = (*sc - max).exp();
                            sum += *sc;
                        }
                        let out = &mut att[(t * nh + hh) * hd..(t * nh + hh + 1) * hd];
                        out.fill(0.0);
                        for (p, &w) in scores[..upto].iter().enumerate() {
                            let vv = &vc[(p * nkv + g) * hd..(p * nkv + g + 1) * hd];
                            for (o, &b) in out.iter_mut().zip(vv) {
                                *o += w / sum * b;
                            }
                        }
                    }
                }
            });
            l.o.matmul(0..d, 0..nq, &att, &mut o);
            Self::allreduce(comm, &mut o, stats)?;
            for (x, o) in x.iter_mut().zip(&o) {
                *x += o;
            }
            for t in 0..t_n {
                rms_norm(&x[t * d..(t + 1) * d], &l.ffn_norm, cfg.eps, &mut h[t * d..(t + 1) * d]);
            }
            l.gate.matmul(0..nf, 0..d, &h, &mut gate);
            l.up.matmul(0..nf, 0..d, &h, &mut up);
            for (g, u) in gate.iter_mut().zip(&up) {
                *g = *g / (1.0 + (-*g).exp()) * u;
            }
            l.down.matmul(0..d, 0..nf, &gate, &mut o);
            Self::allreduce(comm, &mut o, stats)?;
            for (x, o) in x.iter_mut().zip(&o) {
                *x += o;
            }
        }
        cache.len += t_n;
        Ok(())
    }

    /// The logits of `x`'s rows (all, or the last), the full vocabulary on every rank.
    pub(crate) fn head(&self, comm: &Comm, x: &[f32], all: bool, stats: &mut CommStats) -> Result<Vec<f32>, Error> {
        let (cfg, s) = (&self.cfg, &self.shard);
        let d = cfg.dim;
        let t_n = x.len() / d;
        let mut h = vec![0.0; t_n * d];
        let first = if all { 0 } else { t_n - 1 };
        let rows = t_n - first;
        for t in first..t_n {
            rms_norm(&x[t * d..(t + 1) * d], &self.out_norm, cfg.eps, &mut h[(t - first) * d..(t - first + 1) * d]);
        }
        let mut part = vec![0.0; rows * s.vocab.len()];
        self.output.matmul(0..s.vocab.len(), 0..d, &h[..rows * d], &mut part);
        // The full vocabulary on every rank: each fills its range, the sum assembles them.
        let mut logits = vec![0.0; rows * cfg.vocab];
        for t in 0..rows {
            logits[t * cfg.vocab + s.vocab.start..t * cfg.vocab + s.vocab.end]
                .copy_from_slice(&part[t * s.vocab.len()..(t + 1) * s.vocab.len()]);
        }
        Self::allreduce(comm, &mut logits, stats)?;
        Ok(logits)
    }
}

/// SmolLM2-135M's shape (9 query heads over 3 KV heads, 30 layers), for tests.
#[cfg(test)]
pub(crate) fn smollm2_shape() -> Config {
    Config {
        dim: 576,
        layers: 30,
        heads: 9,
        kv_heads: 3,
        head_dim: 64,
        ffn: 1536,
        vocab: 10,
        eps: 1e-5,
        rope_base: 1e4,
        ctx: 8,
        rope: RopePairs::Adjacent,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_cover_everything_once() {
        for (n, parts) in [(9, 2), (9, 4), (48, 5), (3, 3)] {
            let all: Vec<usize> = (0..parts).flat_map(|i| split(n, parts, i)).collect();
            assert_eq!(all, (0..n).collect::<Vec<_>>());
        }
        // SmolLM2's 9 query heads over 3 KV heads, on 2 ranks: KV head 1 on both.
        let cfg = Config { layers: 1, ..smollm2_shape() };
        let (a, b) = (Shard::new(&cfg, 0, 2, 0, 1).unwrap(), Shard::new(&cfg, 1, 2, 0, 1).unwrap());
        assert_eq!((a.heads, a.kv, a.ffn), (0..5, 0..2, 0..768));
        assert_eq!((b.heads, b.kv, b.ffn), (5..9, 1..3, 768..1536));
        assert!(Shard::new(&cfg, 0, 10, 0, 1).is_err());
        assert!(Shard::new(&cfg, 0, 1, 0, 2).is_err(), "2 stages of 1 layer");
    }

    /// Shapes from a model file whose products would wrap are refused, not run.
    #[test]
    fn shapes_whose_products_wrap_are_refused() {
        assert!(Config::checked(smollm2_shape()).is_ok());
        let huge = |c: Config| Config::checked(c).unwrap_err();
        let e = huge(Config { heads: 1 << 33, kv_heads: 1, head_dim: 1 << 32, ..smollm2_shape() });
        assert!(e.contains("the query width (heads x head dimension) over a context of 8 tokens"), "{e}");
        let e = huge(Config { ctx: usize::MAX / 2, ..smollm2_shape() });
        assert!(e.contains("over a context of"), "{e}");
        let e = huge(Config { vocab: usize::MAX / 8, ..smollm2_shape() });
        assert!(e.contains("the vocabulary over a context of 8 tokens does not fit in memory"), "{e}");
    }
}
