//! `mprun -np N mpr-llm --model FILE --prompt "..." [--tokens K] [--tp T --pp P]`: a
//! Llama-architecture model (GGUF, or a safetensors directory) run across the job's ranks, P pipeline stages of T ranks
//! of tensor parallelism each (model.rs), the prompt prefilled in micro-batches, then token-by-token decoding with a KV cache, greedy or sampled, the text
//! streamed on rank 0 as it is generated.

mod gguf;
mod hf;
mod model;
mod quant;
mod serve;
mod tokenizer;
mod weights;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use rand::{Rng, SeedableRng};

#[derive(Parser, Debug, Clone)]
#[command(name = "mpr-llm", about = "A sharded LLM forward pass on mpr (run under mprun)")]
pub(crate) struct Args {
    /// The model (Llama architecture): a GGUF file (F32, F16, BF16, Q8_0, Q4_0, Q4_1 tensors),
    /// or a Hugging Face directory (config.json, safetensors of F32, F16, BF16, tokenizer.json)
    #[arg(long)]
    model: PathBuf,
    /// The prompt (without it, with --chat: a conversation, a line of stdin a turn)
    #[arg(long, required_unless_present_any = ["chat", "serve"])]
    prompt: Option<String>,
    /// Apply the model's chat template (a user message; a system message with --system)
    #[arg(long)]
    chat: bool,
    /// With --chat: the system message (else the template's default, if it has one)
    #[arg(long, requires = "chat")]
    system: Option<String>,
    /// Tokens to generate (fewer if the model ends its text)
    #[arg(long, default_value_t = 32)]
    tokens: usize,
    /// Ranks of tensor parallelism per pipeline stage (default: the job's ranks / --pp; with
    /// neither flag, chosen from the hosts and the model's shape)
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    tp: Option<u64>,
    /// Pipeline stages, each a contiguous range of the layers (tp x pp = the job's ranks)
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pp: Option<u64>,
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
    /// Serve an OpenAI-compatible /v1/chat/completions (streaming and not) at ADDR
    /// (host:port; port 0 picks one) from rank 0, every rank taking part in each request
    #[arg(long, value_name = "ADDR", conflicts_with_all = ["prompt", "chat"])]
    serve: Option<String>,
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
pub(crate) enum Failure {
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
pub(crate) fn agree<T>(world: &mpr::Comm, r: Result<T, String>) -> Result<T, Failure> {
    let me = world.rank() as u32;
    let mut first = [if r.is_err() { me } else { u32::MAX }];
    world.allreduce_in_place(&mut first, mpr::Min)?;
    match r {
        Ok(v) if first[0] == u32::MAX => Ok(v),
        Err(e) if first[0] == me => Err(Failure::Say(if world.size() > 1 { format!("rank {me}: {e}") } else { e })),
        _ => Err(Failure::Elsewhere),
    }
}

/// Rank 0's text as it comes, on stdout.
fn print(piece: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(piece.as_bytes());
    let _ = out.flush();
}

/// The split with neither --tp nor --pp: tensor parallelism within a host (its all-reduces,
/// two per layer, stay in shared memory), a pipeline stage per host (one send per stage
/// boundary crosses the network), as far as the model's heads and layers allow; on one
/// host, tensor parallelism over every rank. `hosts`: the job's hosts, each with
/// `per_host` ranks numbered contiguously, if it is so laid out.
fn choose_split(ranks: usize, hosts: Option<(usize, usize)>, cfg: &model::Config) -> Result<(usize, usize), String> {
    // The most ranks of tensor parallelism dividing `n`, within the heads.
    let best_tp = |n: usize| (1..=n.min(cfg.heads)).rev().find(|d| n.is_multiple_of(*d)).unwrap_or(1);
    let tp = match hosts {
        Some((n, per_host)) if n > 1 => best_tp(per_host),
        _ => best_tp(ranks),
    };
    let pp = ranks / tp;
    if pp > cfg.layers {
        return Err(format!(
            "{ranks} ranks do not split over a model of {} query heads and {} layers (give --tp and --pp)",
            cfg.heads, cfg.layers
        ));
    }
    Ok((tp, pp))
}

/// The hosts of the job, if every host has as many ranks and each host's ranks are
/// numbered contiguously: (hosts, ranks per host).
fn host_layout(world: &mpr::Comm) -> Result<Option<(usize, usize)>, Failure> {
    let node = world.split_shared(0)?;
    let (me, n) = (world.rank() as u64, node.size() as u64);
    // Contiguous: every rank of the host has the same first rank, a multiple of its size.
    let first = me - node.rank() as u64;
    let mut same = [first, u64::MAX - first];
    node.allreduce_in_place(&mut same, mpr::Max)?;
    let contiguous = same[0] == u64::MAX - same[1] && first.is_multiple_of(n);
    // And every host of the same size.
    let mut check = [n, u64::MAX - n, u64::from(!contiguous)];
    world.allreduce_in_place(&mut check, mpr::Max)?;
    let even = check[0] == u64::MAX - check[1] && check[2] == 0;
    Ok(even.then(|| (world.size() / n as usize, n as usize)))
}

fn run(world: &mpr::Comm, a: &Args) -> Result<(), Failure> {
    let me = world.rank();
    let opened = (|| {
        let file = weights::Weights::open(&a.model)?;
        let cfg = file.config()?;
        let tok = file.tokenizer()?;
        if tok.vocab() != cfg.vocab {
            return Err(format!("the tokenizer has {} tokens, the model {}", tok.vocab(), cfg.vocab));
        }
        Ok((file, cfg, tok))
    })();
    let (file, cfg, tok) = agree(world, opened)?;
    let split = match (a.tp, a.pp) {
        (None, None) => {
            let s = choose_split(world.size(), host_layout(world)?, &cfg);
            if let (Ok((tp, pp)), 0) = (&s, me) {
                if world.size() > 1 {
                    eprintln!("mpr-llm: tensor parallel over {tp} ranks in each of {pp} pipeline stage(s)");
                }
            }
            s
        }
        (tp, pp) => {
            let pp = pp.unwrap_or(1) as usize;
            let tp = tp.map_or(world.size() / pp, |t| t as usize).max(1);
            if tp.checked_mul(pp) != Some(world.size()) {
                Err(format!("--tp {tp} x --pp {pp} is not the job's {} ranks", world.size()))
            } else {
                Ok((tp, pp))
            }
        }
    };
    let (tp, pp) = agree(world, split)?;
    // Stage s holds ranks s*tp.. s*tp+tp-1, a tensor-parallel group of its own.
    let (stage, tp_rank) = (me / tp, me % tp);
    let group = world.split(Some(stage as u32), tp_rank as i32)?.expect("every rank has a stage");
    let loaded =
        model::Shard::new(&cfg, tp_rank, tp, stage, pp).and_then(|shard| model::Model::load(&file, cfg.clone(), shard));
    let m = agree(world, loaded)?;
    let mut chat = Chat { template: None, messages: Vec::new(), cached: String::new() };
    if a.chat {
        chat.template = Some(agree(world, file.chat_template())?.to_string());
        if let Some(system) = &a.system {
            chat.messages.push(("system".into(), system.clone()));
        }
    }
    if let Some(addr) = &a.serve {
        let template = file.chat_template().map(str::to_string).ok();
        return serve::serve(world, &group, (stage, pp), &m, &tok, template, addr, a);
    }
    let mut t = Turn::new(&m, &tok, world, &group, (stage, pp), a);
    match &a.prompt {
        Some(p) => {
            let text = agree(world, chat.user(p, &tok))?;
            t.run(&text, a.dump_logits.as_deref(), &mut print)?;
        }
        None => {
            // A conversation: rank 0 reads a line at a time (mprun gives it mprun's stdin),
            // everyone takes it; the KV cache keeps the turns before.
            let mut stdin = std::io::stdin().lock();
            loop {
                let mut line = String::new();
                if me == 0 {
                    if mpr::stderr_is_terminal() {
                        eprint!("> ");
                    }
                    if std::io::BufRead::read_line(&mut stdin, &mut line).unwrap_or(0) == 0 {
                        line.clear();
                        if mpr::stderr_is_terminal() {
                            // Ctrl-D: end the prompt's line, as a shell does.
                            eprintln!();
                        }
                    }
                }
                let mut len = [line.len() as u64];
                world.bcast(&mut len, 0)?;
                if len[0] == 0 {
                    break;
                }
                let mut bytes = line.into_bytes();
                bytes.resize(len[0] as usize, 0);
                world.bcast(&mut bytes, 0)?;
                let line = String::from_utf8_lossy(&bytes).trim_end_matches(['\n', '\r']).to_string();
                if line.is_empty() {
                    continue;
                }
                let text = agree(world, chat.user(&line, &tok))?;
                let reply = t.run(&text, None, &mut print)?;
                chat.assistant(reply.text);
            }
        }
    }
    report_memory(world, m.shard_bytes())
}

/// This process's peak resident memory, in bytes (the model's pages it touched included).
fn peak_resident() -> u64 {
    let max = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF).map_or(0, |u| u.max_rss());
    // Bytes on macOS, KiB elsewhere.
    if cfg!(target_os = "macos") {
        max as u64
    } else {
        max as u64 * 1024
    }
}

/// Every rank's peak resident memory and the weights of its shard (`shard` bytes here), on
/// rank 0's stderr.
fn report_memory(world: &mpr::Comm, shard: usize) -> Result<(), Failure> {
    let n = world.size();
    let mut all = vec![0u64; 2 * n];
    (all[world.rank()], all[n + world.rank()]) = (peak_resident(), shard as u64);
    world.allreduce_in_place(&mut all, mpr::Sum)?;
    if world.rank() == 0 {
        let mib = |v: &[u64]| v.iter().map(|&b| format!("{:.1}", b as f64 / (1 << 20) as f64)).collect::<Vec<_>>();
        eprintln!("peak resident memory per rank (MiB): {}", mib(&all[..n]).join(" "));
        eprintln!("weights in each rank's shard (MiB): {}", mib(&all[n..]).join(" "));
    }
    Ok(())
}

/// A conversation under the model's chat template (a Jinja template in its metadata).
pub(crate) struct Chat {
    template: Option<String>,
    messages: Vec<(String, String)>,
    /// The text the KV cache holds so far.
    cached: String,
}

/// What a turn generated.
pub(crate) struct Reply {
    text: String,
    prompt_tokens: usize,
    tokens: usize,
    /// The model ended its text (else it ran out of tokens).
    ended: bool,
}

impl Chat {
    pub(crate) fn render(&self, generation_prompt: bool, tok: &tokenizer::Tokenizer) -> Result<String, String> {
        let template = self.template.as_deref().expect("a chat");
        let mut env = minijinja::Environment::new();
        env.add_function("raise_exception", |msg: String| -> Result<String, minijinja::Error> {
            Err(minijinja::Error::new(minijinja::ErrorKind::InvalidOperation, msg))
        });
        let messages: Vec<_> =
            self.messages.iter().map(|(r, c)| minijinja::context! { role => r, content => c }).collect();
        let token =
            |id: Option<u32>| id.map(|i| String::from_utf8_lossy(&tok.bytes(i)).into_owned()).unwrap_or_default();
        env.render_str(
            template,
            minijinja::context! {
                messages => messages,
                add_generation_prompt => generation_prompt,
                bos_token => token(tok.bos),
                eos_token => token(tok.eos),
            },
        )
        .map_err(|e| format!("the model's chat template: {e}"))
    }

    /// The text to feed for the user's `text`: the prompt itself outside a chat, else what
    /// the template adds to the conversation the cache holds.
    fn user(&mut self, text: &str, tok: &tokenizer::Tokenizer) -> Result<String, String> {
        if self.template.is_none() {
            return Ok(text.to_string());
        }
        self.messages.push(("user".into(), text.to_string()));
        let full = self.render(true, tok)?;
        let new = match full.strip_prefix(&self.cached) {
            Some(rest) => rest.to_string(),
            None => return Err("the chat template rewrites earlier turns; not implemented".into()),
        };
        self.cached = full;
        Ok(new)
    }

    fn assistant(&mut self, reply: String) {
        if self.template.is_some() {
            self.cached.push_str(&reply);
            self.messages.push(("assistant".into(), reply));
        }
    }
}

/// One prompt's prefill and decoding.
pub(crate) struct Turn<'a, 'm> {
    m: &'a model::Model<'m>,
    tok: &'a tokenizer::Tokenizer,
    world: &'a mpr::Comm,
    /// This rank's tensor-parallel group (its pipeline stage's ranks).
    group: &'a mpr::Comm,
    /// This rank's pipeline stage, of how many.
    stage: (usize, usize),
    a: &'a Args,
    rng: rand::rngs::SmallRng,
    cache: model::Cache,
}

/// Tag of the activations passed between pipeline stages.
const TAG_ACT: i32 = 7;

impl<'a, 'm> Turn<'a, 'm> {
    pub(crate) fn new(
        m: &'a model::Model<'m>,
        tok: &'a tokenizer::Tokenizer,
        world: &'a mpr::Comm,
        group: &'a mpr::Comm,
        stage: (usize, usize),
        a: &'a Args,
    ) -> Self {
        let rng = rand::rngs::SmallRng::seed_from_u64(a.seed);
        Turn { m, tok, world, group, stage, a, rng, cache: m.new_cache() }
    }

    /// The world rank that samples: the last stage's first rank.
    fn leader(&self) -> usize {
        (self.stage.1 - 1) * self.group.size()
    }

    /// `tokens` through this rank's stage: the embeddings (first stage) or the activations
    /// from the stage before, its layers, then on to the next stage or (last stage) the
    /// logits.
    fn step(&mut self, tokens: &[u32], all: bool, stats: &mut model::CommStats) -> Result<Option<Vec<f32>>, Failure> {
        let (stage, stages) = self.stage;
        let (me, tp, d) = (self.world.rank(), self.group.size(), self.m.cfg.dim);
        let mut x = if stage == 0 {
            self.m.embed(tokens).map_err(Failure::Say)?
        } else {
            let mut x = vec![0.0f32; tokens.len() * d];
            self.world.recv(&mut x, me - tp, TAG_ACT)?;
            x
        };
        self.m.layers(self.group, &mut self.cache, &mut x, stats)?;
        if stage + 1 < stages {
            self.world.send(&x, me + tp, TAG_ACT)?;
            return Ok(None);
        }
        Ok(Some(self.m.head(self.group, &x, all, stats)?))
    }

    /// The prompt through the pipeline in micro-batches, so that stages overlap: stage s
    /// works on one while stage s+1 works on the one before. The logits (last stage) of
    /// every position if `all`, else of the last.
    fn prefill(&mut self, prompt: &[u32], all: bool, stats: &mut model::CommStats) -> Result<Vec<f32>, Failure> {
        let stages = self.stage.1;
        let chunk = if stages == 1 { prompt.len() } else { prompt.len().div_ceil(2 * stages).max(1) };
        let mut logits = Vec::new();
        let pieces: Vec<&[u32]> = prompt.chunks(chunk).collect();
        for (i, piece) in pieces.iter().enumerate() {
            let last = i + 1 == pieces.len();
            if let Some(l) = self.step(piece, all || last, stats)? {
                if all {
                    logits.extend(l);
                } else {
                    logits = l;
                }
            }
        }
        Ok(logits)
    }
    /// Feeds `text` and generates; hands the reply to `emit` on rank 0 as it comes (whole
    /// UTF-8 characters) and returns it.
    pub(crate) fn run(
        &mut self,
        text: &str,
        dump: Option<&std::path::Path>,
        emit: &mut dyn FnMut(&str),
    ) -> Result<Reply, Failure> {
        let (world, a, tok, m) = (self.world, self.a, self.tok, self.m);
        let (me, vocab) = (world.rank(), m.cfg.vocab);
        let prompt = tok.encode(text);
        let checked = if prompt.is_empty() {
            Err("the prompt has no tokens".to_string())
        } else if self.cache.len.saturating_add(prompt.len()).saturating_add(a.tokens) > m.cfg.ctx {
            Err(format!(
                "{} tokens so far + {} more exceed the model's context of {}",
                self.cache.len.saturating_add(prompt.len()),
                a.tokens,
                m.cfg.ctx
            ))
        } else {
            Ok(())
        };
        agree(world, checked)?;
        let mut stats = model::CommStats::default();
        world.barrier()?;
        let t0 = mpr::wtime();
        let logits = self.prefill(&prompt, dump.is_some(), &mut stats)?;
        let prefill = mpr::wtime() - t0;
        let prefill_stats = stats;
        let leader = self.leader();
        if let (Some(path), true) = (dump, me == leader) {
            let text: String = logits
                .chunks(vocab)
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
        let mut last = if me == leader { logits[logits.len() - vocab..].to_vec() } else { Vec::new() };
        let (mut pending, mut reply): (Vec<u8>, Vec<u8>) = (Vec::new(), Vec::new());
        let (mut generated, mut ended) = (0, false);
        stats = model::CommStats::default();
        let t1 = mpr::wtime();
        while generated < a.tokens {
            // The last stage's first rank draws; everyone takes its choice.
            let mut next = [if me == leader { sample(&last, a, &mut self.rng) } else { 0 }];
            world.bcast(&mut next, leader)?;
            generated += 1;
            if Some(next[0]) == tok.eos {
                ended = true;
                break;
            }
            let piece = tok.bytes(next[0]);
            reply.extend(&piece);
            if me == 0 {
                // Text as it comes, a UTF-8 sequence split across tokens held until whole.
                pending.extend(piece);
                let valid = match std::str::from_utf8(&pending) {
                    Ok(_) => pending.len(),
                    Err(err) if err.error_len().is_none() => err.valid_up_to(),
                    Err(_) => pending.len(),
                };
                emit(&String::from_utf8_lossy(&pending[..valid]));
                pending.drain(..valid);
            }
            if generated == a.tokens && !a.chat {
                break;
            }
            // (In a chat the last token goes in too: the cache holds the whole reply.)
            if let Some(l) = self.step(&next, false, &mut stats)? {
                last = l;
            }
        }
        let decode = mpr::wtime() - t1;
        if me == 0 {
            emit(&(String::from_utf8_lossy(&pending).into_owned() + if a.serve.is_none() { "\n" } else { "" }));
            let steps = (generated.max(1) - 1).max(1) as f64;
            eprintln!("prefill: {} tokens, {:.1} tok/s", prompt.len(), prompt.len() as f64 / prefill);
            eprintln!("decode: {generated} tokens, {:.1} tok/s", generated as f64 / decode);
            if self.group.size() > 1 {
                eprintln!(
                    "all-reduce: {:.1} per token, {:.1} us each (prefill {} in {:.1} ms)",
                    stats.allreduces as f64 / steps,
                    stats.secs / stats.allreduces.max(1) as f64 * 1e6,
                    prefill_stats.allreduces,
                    prefill_stats.secs * 1e3
                );
            }
        }
        Ok(Reply {
            text: String::from_utf8_lossy(&reply).into_owned(),
            prompt_tokens: prompt.len(),
            tokens: generated,
            ended,
        })
    }
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

#[cfg(test)]
mod tests {
    #[test]
    fn the_split_follows_the_hosts_and_the_heads() {
        let cfg = model::smollm2_shape();
        use super::{choose_split as c, model};
        assert_eq!(c(2, Some((1, 2)), &cfg), Ok((2, 1)), "one host: tensor parallel");
        assert_eq!(c(3, None, &cfg), Ok((3, 1)));
        assert_eq!(c(4, Some((2, 2)), &cfg), Ok((2, 2)), "two hosts of two: a stage per host");
        assert_eq!(c(3, Some((3, 1)), &cfg), Ok((1, 3)), "three hosts of one: a pipeline");
        assert_eq!(c(12, Some((1, 12)), &cfg), Ok((6, 2)), "9 heads: at most 6 of 12 ranks");
        assert_eq!(c(8, Some((2, 4)), &cfg), Ok((4, 2)));
        assert!(c(64, Some((64, 1)), &cfg).is_err(), "64 stages of 30 layers");
    }
}
