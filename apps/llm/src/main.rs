//! `mprun -np N mpr-llm --model FILE --prompt "..." [--tokens K]`: a Llama-architecture model
//! (GGUF) run across the job's ranks by tensor parallelism (model.rs), the prompt prefilled
//! in one pass, then token-by-token decoding with a KV cache, greedy or sampled, the text
//! streamed on rank 0 as it is generated.

mod gguf;
mod model;
mod quant;
mod tokenizer;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use rand::{Rng, SeedableRng};

#[derive(Parser, Debug)]
#[command(name = "mpr-llm", about = "A sharded LLM forward pass on mpr (run under mprun)")]
struct Args {
    /// The model: a GGUF file (Llama architecture; F32, F16, BF16, Q8_0, Q4_0, Q4_1 tensors)
    #[arg(long)]
    model: PathBuf,
    /// The prompt
    #[arg(long)]
    prompt: String,
    /// Tokens to generate (fewer if the model ends its text)
    #[arg(long, default_value_t = 32)]
    tokens: usize,
    /// Ranks of tensor parallelism (the job's ranks; pipeline stages are not implemented yet)
    #[arg(long)]
    tp: Option<usize>,
    /// Sampling temperature (0: greedy)
    #[arg(long, default_value_t = 0.0)]
    temperature: f32,
    /// Sample among the K most likely tokens only (0: all)
    #[arg(long, default_value_t = 0)]
    top_k: usize,
    /// Sample among the most likely tokens whose probabilities add up to P
    #[arg(long, default_value_t = 1.0)]
    top_p: f32,
    /// Seed of the sampler
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Test only: write the logits of every prompt position to FILE (a line per position),
    /// and the prompt's token ids to FILE.tokens
    #[arg(long, hide = true, value_name = "FILE")]
    dump_logits: Option<PathBuf>,
}

/// The next token from `logits`: the most likely (temperature 0), else sampled.
fn sample(logits: &[f32], a: &Args, rng: &mut rand::rngs::SmallRng) -> u32 {
    let best = || logits.iter().enumerate().fold(0, |b, (i, &v)| if v > logits[b] { i } else { b }) as u32;
    if a.temperature <= 0.0 {
        return best();
    }
    let mut cand: Vec<(usize, f32)> = logits.iter().copied().enumerate().collect();
    cand.sort_by(|x, y| y.1.total_cmp(&x.1));
    if a.top_k > 0 {
        cand.truncate(a.top_k);
    }
    let max = cand[0].1;
    let mut probs: Vec<f32> = cand.iter().map(|&(_, v)| ((v - max) / a.temperature).exp()).collect();
    let total: f32 = probs.iter().sum();
    let mut acc = 0.0;
    let mut keep = probs.len();
    for (i, p) in probs.iter_mut().enumerate() {
        *p /= total;
        acc += *p;
        if acc >= a.top_p {
            keep = keep.min(i + 1);
        }
    }
    let mass: f32 = probs[..keep].iter().sum();
    let mut r = rng.gen::<f32>() * mass;
    for (i, &p) in probs[..keep].iter().enumerate() {
        if r < p {
            return cand[i].0 as u32;
        }
        r -= p;
    }
    cand[keep - 1].0 as u32
}

/// Why a run stopped: a fault this rank reports (the lowest rank that met one), one another
/// rank reports, or a communication error.
#[derive(Debug)]
enum Failure {
    Say(String),
    Elsewhere,
}

impl From<mpr::Error> for Failure {
    fn from(e: mpr::Error) -> Failure {
        Failure::Say(e.to_string())
    }
}

/// Every rank passes here with what it found: all go on if all succeeded, else all stop, and
/// the lowest rank that failed says why (the others may have failed alike, or not at all).
fn agree<T>(world: &mpr::Comm, r: Result<T, String>) -> Result<T, Failure> {
    let me = world.rank() as u32;
    let mut first = [if r.is_err() { me } else { u32::MAX }];
    world.allreduce_in_place(&mut first, mpr::Min)?;
    match r {
        Ok(v) if first[0] == u32::MAX => Ok(v),
        Err(e) if first[0] == me => Err(Failure::Say(if world.size() > 1 { format!("rank {me}: {e}") } else { e })),
        _ => Err(Failure::Elsewhere),
    }
}

fn run(world: &mpr::Comm, a: &Args) -> Result<(), Failure> {
    let me = world.rank();
    let tp = a.tp.unwrap_or(world.size());
    let opened = (|| {
        if tp != world.size() {
            return Err(format!(
                "--tp {tp} with {} ranks: pipeline stages are not implemented yet, so --tp must be the job's rank count",
                world.size()
            ));
        }
        let file = gguf::Gguf::open(&a.model)?;
        let cfg = model::Config::from_gguf(&file)?;
        let tok = tokenizer::Tokenizer::from_gguf(&file)?;
        if tok.vocab() != cfg.vocab {
            return Err(format!("the tokenizer has {} tokens, the model {}", tok.vocab(), cfg.vocab));
        }
        Ok((file, cfg, tok))
    })();
    let (file, cfg, tok) = agree(world, opened)?;
    let loaded = model::Shard::new(&cfg, me, tp).and_then(|shard| model::Model::load(&file, cfg.clone(), shard));
    let m = agree(world, loaded)?;
    let prompt = tok.encode(&a.prompt);
    let checked = if prompt.is_empty() {
        Err("the prompt has no tokens".to_string())
    } else if prompt.len() + a.tokens > cfg.ctx {
        Err(format!("{} prompt tokens + {} more exceed the model's context of {}", prompt.len(), a.tokens, cfg.ctx))
    } else {
        Ok(())
    };
    agree(world, checked)?;
    let mut cache = m.new_cache();
    let mut stats = model::CommStats::default();
    world.barrier()?;
    let t0 = mpr::wtime();
    let logits = m.forward(world, &mut cache, &prompt, a.dump_logits.is_some(), &mut stats)?;
    let prefill = mpr::wtime() - t0;
    let prefill_stats = stats;
    if let (Some(path), 0) = (&a.dump_logits, me) {
        let text: String = logits
            .chunks(cfg.vocab)
            .map(|row| row.iter().map(|v| format!("{v:e} ")).collect::<String>() + "\n")
            .collect();
        // And the prompt's token ids beside them, in FILE.tokens.
        let ids: Vec<String> = prompt.iter().map(u32::to_string).collect();
        let tokens = PathBuf::from(format!("{}.tokens", path.display()));
        // (Not an error: the other ranks are already on their way to the next token.)
        if let Err(err) = std::fs::write(path, text).and_then(|()| std::fs::write(&tokens, ids.join(","))) {
            eprintln!("mpr-llm: cannot write {}: {err}", path.display());
        }
    }
    let mut last = logits[logits.len() - cfg.vocab..].to_vec();
    let mut rng = rand::rngs::SmallRng::seed_from_u64(a.seed);
    let mut out = std::io::stdout().lock();
    let mut pending: Vec<u8> = Vec::new();
    let mut generated = 0;
    stats = model::CommStats::default();
    let t1 = mpr::wtime();
    while generated < a.tokens {
        // Rank 0 draws; everyone takes its choice.
        let mut next = [if me == 0 { sample(&last, a, &mut rng) } else { 0 }];
        world.bcast(&mut next, 0)?;
        generated += 1;
        if Some(next[0]) == tok.eos {
            break;
        }
        if me == 0 {
            // Text as it comes, a UTF-8 sequence split across tokens held until whole.
            pending.extend(tok.bytes(next[0]));
            let valid = match std::str::from_utf8(&pending) {
                Ok(_) => pending.len(),
                Err(err) if err.error_len().is_none() => err.valid_up_to(),
                Err(_) => pending.len(),
            };
            let _ = out.write_all(&pending[..valid]);
            let _ = out.flush();
            pending.drain(..valid);
        }
        if generated == a.tokens {
            break;
        }
        let logits = m.forward(world, &mut cache, &next, false, &mut stats)?;
        last = logits;
    }
    let decode = mpr::wtime() - t1;
    if me == 0 {
        let _ = out.write_all(&pending);
        let _ = writeln!(out);
        let steps = (generated.max(1) - 1).max(1) as f64;
        eprintln!("prefill: {} tokens, {:.1} tok/s", prompt.len(), prompt.len() as f64 / prefill);
        eprintln!("decode: {generated} tokens, {:.1} tok/s", generated as f64 / decode);
        if tp > 1 {
            eprintln!(
                "all-reduce: {:.1} per token, {:.1} us each (prefill {} in {:.1} ms)",
                stats.allreduces as f64 / steps,
                stats.secs / stats.allreduces.max(1) as f64 * 1e6,
                prefill_stats.allreduces,
                prefill_stats.secs * 1e3
            );
        }
        eprintln!(
            "weights read by rank 0: {:.1} MiB (tensor parallel over {tp})",
            m.shard_bytes() as f64 / (1 << 20) as f64
        );
    }
    Ok(())
}

fn main() -> ExitCode {
    let args = Args::parse();
    let universe = match mpr::init() {
        Ok(u) => u,
        Err(e) => {
            eprintln!("mpr-llm: init failed: {e}");
            return ExitCode::from(2);
        }
    };
    let world = universe.world();
    match run(&world, &args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            if let Failure::Say(e) = f {
                eprintln!("mpr-llm: {e}");
            }
            // Nobody leaves before the one that says why has (a launcher stops the job at
            // the first rank that exits with an error).
            let _ = world.barrier();
            ExitCode::from(2)
        }
    }
}
