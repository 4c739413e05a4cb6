#!/usr/bin/env bash
# Times CI and the demo from nothing on this machine, phase by phase, and prints a table of each.
#
#   bench/fresh_ci.sh [apt] [ci] [demo]     (all three when none is named; as root)
#
# apt   .ci/install in a container from a bare Debian root (debootstrap from the Debian mirror,
#       `docker import`: no registry), into which the packages a fresh machine of this kind
#       already has (Python, gcc, make, cmake, git) were put first, untimed: apt cannot be undone
#       on this machine. The root is kept in $RULER_FRESH_ROOT (default /tmp/ruler-fresh-rootfs).
# ci    `bash .ci/run` (CI=true) in a fresh clone of HEAD, with HOME, XDG_CACHE_HOME (the testbed's
#       cache, Hugging Face's, vLLM's, matplotlib's) and PIP_CACHE_DIR pointed at empty folders:
#       the venv, the llama.cpp build, the models and vLLM's pip all happen from scratch. HOME
#       keeps the machine's pip configuration (~/.config/pip), which a fresh machine has too.
# demo  `make demo` the same way, in another fresh clone and cache (llama.cpp only, no vLLM).
#
# The Docker engine and the Slurm cluster are this machine's (.ci/run starts them when down).
# The testbed's images are tagged as the shared cache's are (ruler-testbed/...): a from-nothing
# run replaces them with its own build's, and the next `ruler testbed` on the shared cache remakes
# them (seconds). Run it on an otherwise idle machine: the load beside each phase is printed, and
# on 2 cores each other job's load stretches every phase. Work folders: $RULER_FRESH_DIR (default
# a new /tmp/ruler-fresh.XXXX), kept for their logs.
set -euo pipefail

repo=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
work=${RULER_FRESH_DIR:-$(mktemp -d /tmp/ruler-fresh.XXXX)}
rootfs=${RULER_FRESH_ROOT:-/tmp/ruler-fresh-rootfs}
modes=("$@")
[ ${#modes[@]} -eq 0 ] && modes=(apt ci demo)
mkdir -p "$work"
echo "work folder: $work (HEAD $(git -C "$repo" rev-parse --short HEAD))"

# A line "SECONDS LOAD1" every 5 s, for the load beside each phase.
sample_load() { while :; do echo "$(date +%s.%N) $(cut -d' ' -f1 /proc/loadavg)"; sleep 5; done; }

# Each line of stdin as "EPOCH LINE", flushed as it comes.
stamp() { python3 -u -c 'import sys, time
for line in sys.stdin: sys.stdout.write(f"{time.time():.1f} {line}")'; }

# The table: each "== STEP" line of the log opens a phase that the next one closes (the background
# testbed: from its start to "== testbed: done"), with the mean 1-minute load over it.
table() {  # LOG LOADLOG START TITLE
  python3 - "$@" <<'EOF'
import re, sys
log, loadlog, start, title = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
lines = [(float(t), rest) for t, _, rest in (ln.rstrip("\n").partition(" ") for ln in open(log)) if t]
loads = [tuple(map(float, ln.split())) for ln in open(loadlog) if ln.strip()]
end = lines[-1][0] if lines else start
def load(a, b):
    xs = [v for t, v in loads if a <= t <= b + 5]
    return f"{min(xs):.1f}-{max(xs):.1f}" if xs else "-"
# make's own echo of a step's first command marks the steps that print no "== STEP" line.
ECHOED = {"python3 -m venv": "setup (venv, pip install -e)", ".venv/bin/ruler testbed": "testbed",
          ".venv/bin/ruler run": "the demo campaign"}
def mark(rest):
    if m := re.match(r"== (.*)", rest):
        return m.group(1)
    return next((name for cmd, name in ECHOED.items() if rest.startswith(cmd)), None)
marks = [(t, m) for t, rest in lines if (m := mark(rest))]
rows, bg = [], None
first = marks[0][0] if marks else end
rows.append(("before make (.ci/install, dockerd and slurm-up when CI)", start, first))
# The background testbed's start and end are no step of make's own; the integration tier's wait
# for it is.
serial = [(t, "the integration tier waiting for the testbed" if n.startswith("testbed: waiting") else n)
          for t, n in marks if not n.startswith(("testbed, in the background", "testbed: done"))]
for i, (t, name) in enumerate(serial):
    rows.append((name, t, serial[i + 1][0] if i + 1 < len(serial) else end))
tb_start = next((t for t, n in marks if n.startswith("testbed, in the background")), None)
tb_done = next((t for t, n in marks if n.startswith("testbed: done")), None)
if tb_start is not None and tb_done is not None:
    rows.append(("testbed, in the background (from its start to its end)", tb_start, tb_done))
print(f"\n{title}")
print(f"{'phase':<72} {'wall s':>8} {'load':>10}")
for name, a, b in rows:
    print(f"{name[:72]:<72} {b - a:8.0f} {load(a, b):>10}")
print(f"{'total':<72} {end - start:8.0f} {load(start, end):>10}")
for t, rest in lines:  # the testbed's own step times, and each tier's pytest line
    if re.match(r"(\[testbed\] [^:]+: [\d.]+ s|steps: |\S+ tier: |.*\d+ passed.* in )", rest):
        print("  " + rest)
EOF
}

fresh_run() {  # NAME COMMAND...: the command in a fresh clone with empty caches, timed
  local name=$1; shift
  local dir="$work/$name"
  rm -rf "$dir"; mkdir -p "$dir/home/.config" "$dir/cache" "$dir/pip"
  [ -d "$HOME/.config/pip" ] && cp -r "$HOME/.config/pip" "$dir/home/.config/"
  local t0; t0=$(date +%s.%N)
  git clone -q --no-hardlinks "$repo" "$dir/ruler"
  local t1; t1=$(date +%s.%N)
  sample_load > "$dir/load.log" & local sampler=$!
  (cd "$dir/ruler" && { env HOME="$dir/home" XDG_CACHE_HOME="$dir/cache" PIP_CACHE_DIR="$dir/pip" \
     "$@" 2>&1 </dev/null; echo $? > "$dir/rc"; }) | stamp | tee "$dir/out.log" | cut -d' ' -f2-
  local rc; rc=$(cat "$dir/rc")
  kill "$sampler" 2>/dev/null || true
  printf 'clone: %.1f s\n' "$(echo "$t1 - $t0" | bc)" | tee "$dir/table.txt"
  table "$dir/out.log" "$dir/load.log" "$t1" "$name from nothing (exit $rc)" | tee -a "$dir/table.txt"
  return "$rc"
}

apt_phase() {
  local base=ruler-fresh-apt:bookworm pylike=ruler-fresh-apt:python-like
  if ! docker image inspect "$pylike" >/dev/null 2>&1; then
    if [ ! -x "$rootfs/usr/bin/apt-get" ]; then
      command -v debootstrap >/dev/null || { apt-get update -qq; apt-get install -y -qq debootstrap >/dev/null; }
      debootstrap --variant=minbase bookworm "$rootfs" http://deb.debian.org/debian >"$work/debootstrap.log"
    fi
    tar -C "$rootfs" -c . | docker import - "$base" >/dev/null
    # What this kind of machine has before a project installs anything (env/machines: Python, gcc,
    # make, cmake, git, a Docker client but no engine): not timed.
    docker rm -f ruler-fresh-apt-prep >/dev/null 2>&1 || true
    docker run --name ruler-fresh-apt-prep --network host -v /etc/apt/sources.list.d:/srcs:ro "$base" \
      bash -c 'rm -f /etc/apt/sources.list; cp /srcs/* /etc/apt/sources.list.d/; apt-get update -qq &&
               DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 python3-venv gcc g++ make \
               cmake git ca-certificates procps >/dev/null && apt-get clean &&
               rm -rf /var/lib/apt/lists/*' >"$work/apt-prep.log" 2>&1
    docker commit ruler-fresh-apt-prep "$pylike" >/dev/null
    docker rm ruler-fresh-apt-prep >/dev/null
  fi
  local load0; load0=$(cut -d' ' -f1-3 /proc/loadavg)
  local t0; t0=$(date +%s.%N)
  docker run --rm --network host -v "$repo/.ci:/ci:ro" "$pylike" \
    bash -c 'time /ci/install' >"$work/apt.log" 2>&1
  local t1; t1=$(date +%s.%N)
  printf '\napt from a bare Debian (.ci/install in a container): %.0f s, load %s at its start, %s at its end\n' \
    "$(echo "$t1 - $t0" | bc)" "$load0" "$(cut -d' ' -f1-3 /proc/loadavg)" | tee "$work/apt-table.txt"
  grep -E '^(apt-get install|real|user|sys)' "$work/apt.log" | tee -a "$work/apt-table.txt"
}

for mode in "${modes[@]}"; do
  case $mode in
    apt)  apt_phase ;;
    ci)   fresh_run ci bash .ci/run || true ;;
    demo) fresh_run demo make demo || true ;;
    *)    echo "unknown phase $mode (apt, ci, demo)"; exit 2 ;;
  esac
done
echo "logs and tables: $work"
