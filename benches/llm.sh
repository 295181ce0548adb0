#!/usr/bin/env bash
# llm.sh - mpr-llm against MLX (mlx-lm on the CPU) on SmolLM2-135M-Instruct, the same
# prompt and token count, one after the other in one run: prefill and decode tokens/s.
#
# usage: benches/llm.sh            (REPEATS=3 TOKENS=32 PROMPT="..." to change)
#
# Weights on each side:
#   q4   mpr-llm reads the Q4_1 GGUF (apps/llm/fetch-model.sh); MLX reads the same weights
#        (dequantized from that GGUF into a Hugging Face directory by
#        apps/llm/tests/reference.py --to-hf) and quantizes them itself, 4 bits in affine
#        groups of 32 (a scale and a bias per group, the layout of Q4_1).
#   f32  both read that F32 Hugging Face directory: the very same numbers.
# Splits: tensor parallel over N = 1, 2, 3 ranks (mprun -np N; MLX under
# `mlx.launch --backend ring -n N` on loopback, Model.shard()) and pipelines of 2 and 3
# stages (mpr-llm only: mlx-lm offers no pipeline for Llama models). mlx-lm divides the
# heads evenly, so it cannot shard SmolLM2's 9 query / 3 KV heads over 2 ranks: that cell
# says so. Each cell runs REPEATS times, the two sides alternating; medians are printed,
# with mpr-llm / MLX ratios.
#
# Environment: REPEATS, TOKENS, PROMPT, CELLS="WEIGHTS:N:TP:PP ..." (the cells to run),
# KEEP=1 (keep every run's output, in the directory printed at the end).
# Set-up (cached under ~/.cache/mpr): a venv with mlx, mlx-cpu and mlx-lm from PyPI, the one
# with numpy and gguf that the tests use, and the F32 directory (0.5 GB).
set -euo pipefail
SELF=$(realpath "$0")
cd "$(dirname "$SELF")/.."
REPEATS=${REPEATS:-3}
TOKENS=${TOKENS:-32}
PROMPT=${PROMPT:-"The capital of France is"}
CACHE=${MPR_CACHE:-$HOME/.cache/mpr}
MODEL=${MPR_MODEL_DIR:-$CACHE/models}/SmolLM2-135M-Instruct.Q4_1.gguf
HF=$CACHE/models/SmolLM2-135M-Instruct-f32-hf
log() { echo "$@" >&2; }

[[ -e $MODEL ]] || apps/llm/fetch-model.sh >&2
MLX_PY=$CACHE/mlx-venv/bin/python
if [[ ! -x $MLX_PY ]]; then
    log "llm.sh: installing mlx, mlx-cpu and mlx-lm into $CACHE/mlx-venv"
    python3 -m venv "$CACHE/mlx-venv"
    "$MLX_PY" -m pip install -q "mlx[cpu]==0.32.4" "mlx-lm==0.32.2" >&2
fi
REF_PY=$CACHE/venv/bin/python
if [[ ! -x $REF_PY ]]; then
    python3 -m venv "$CACHE/venv"
    "$REF_PY" -m pip install -q numpy==2.4.6 gguf==0.19.0 >&2
fi
if [[ ! -e $HF/model.safetensors ]]; then
    log "llm.sh: writing $HF from the GGUF"
    "$REF_PY" apps/llm/tests/reference.py --to-hf "$MODEL" "$HF.tmp" && mv "$HF.tmp" "$HF"
fi
log "llm.sh: cargo build --release (mprun, mpr-llm)"
cargo build --release -q -p mpr-launcher -p mpr-llm >&2
MPRUN=target/release/mprun
LLM=target/release/mpr-llm
OUT=$(mktemp -d /tmp/mpr-llm-bench.XXXXXX)
[[ -n ${KEEP:-} ]] || trap 'rm -rf "$OUT"' EXIT

# One run: its "prefill: ..." and "decode: ..." lines, or "fails" with what it said.
speeds() { # FILE -> "prefill decode"
    local p d
    p=$(sed -n 's/^prefill: [0-9]* tokens, \([0-9.]*\) tok\/s$/\1/p' "$1" | tail -1)
    d=$(sed -n 's/^decode: [0-9]* tokens, \([0-9.]*\) tok\/s$/\1/p' "$1" | tail -1)
    if [[ -n $p && -n $d ]]; then echo "$p $d"; else echo "fails"; fi
}
mpr() { # WEIGHTS N TP PP FILE
    local m=$MODEL
    [[ $1 == f32 ]] && m=$HF
    "$MPRUN" -np "$2" "$LLM" --model "$m" --prompt "$PROMPT" --tokens "$TOKENS" --tp "$3" --pp "$4" >"$5" 2>&1 || true
}
mlx() { # WEIGHTS N FILE
    if [[ $2 == 1 ]]; then
        "$MLX_PY" benches/llm_mlx.py "$HF" "$PROMPT" "$TOKENS" "$1" >"$3" 2>&1 || true
    else
        timeout 600 "$CACHE/mlx-venv/bin/mlx.launch" --backend ring -n "$2" --python "$MLX_PY" \
            benches/llm_mlx.py "$HF" "$PROMPT" "$TOKENS" "$1" >"$3" 2>&1 || true
    fi
}

CELLS=${CELLS:-"q4:1:1:1 q4:2:2:1 q4:3:3:1 q4:2:1:2 q4:3:1:3 f32:1:1:1 f32:2:2:1 f32:3:3:1"}
for r in $(seq "$REPEATS"); do
    for cell in $CELLS; do
        IFS=: read -r w n tp pp <<<"$cell"
        log "llm.sh: round $r: $w, $n ranks, tp $tp x pp $pp"
        mpr "$w" "$n" "$tp" "$pp" "$OUT/mpr-$cell-$r"
        if [[ $pp == 1 ]]; then mlx "$w" "$n" "$OUT/mlx-$cell-$r"; fi
    done
done

# The report: a cell that cannot be read says so rather than stopping the table.
set +e
median() { sort -n | awk '{v[NR]=$1} END {if (NR==0) print "-"; else if (NR%2) print v[(NR+1)/2]; else printf "%.1f\n", (v[NR/2]+v[NR/2+1])/2}'; }
column() { # SIDE CELL FIELD(1 prefill, 2 decode) -> median, or what failed
    local side=$1 cell=$2 f=$3 vals=() s
    for r in $(seq "$REPEATS"); do
        [[ -e $OUT/$side-$cell-$r ]] || { echo "n/a"; return; }
        s=$(speeds "$OUT/$side-$cell-$r")
        [[ $s == fails ]] && { echo "fails"; return; }
        vals+=("$(cut -d' ' -f"$f" <<<"$s")")
    done
    printf '%s\n' "${vals[@]}" | median
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a+0 > 0 && b+0 > 0) printf "%.2fx", a / b; else print "-" }'; }

echo "SmolLM2-135M-Instruct, \"$PROMPT\", $TOKENS tokens; medians of $REPEATS; tokens/s"
printf '%-5s %-10s | %9s %9s %7s | %9s %9s %7s\n' weights split "mpr pre" "mlx pre" ratio "mpr dec" "mlx dec" ratio
for cell in $CELLS; do
    IFS=: read -r w n tp pp <<<"$cell"
    mp=$(column mpr "$cell" 1) md=$(column mpr "$cell" 2) xp=$(column mlx "$cell" 1) xd=$(column mlx "$cell" 2)
    printf '%-5s %-10s | %9s %9s %7s | %9s %9s %7s\n' "$w" "tp$tp x pp$pp" "$mp" "$xp" "$(ratio "$mp" "$xp")" \
        "$md" "$xd" "$(ratio "$md" "$xd")"
done
for cell in $CELLS; do
    f=$OUT/mlx-$cell-1
    [[ -e $f && $(speeds "$f") == fails ]] && echo "mlx $cell: $(grep -m1 -v '^\s*$' "$f")"
done
[[ -n ${KEEP:-} ]] && log "llm.sh: every run's output is in $OUT"
true
