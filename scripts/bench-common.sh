# Shared by scripts/bench-*.sh (sourced, not run): tool installation, the release agent, a work directory
# cleaned up with every process started, and small helpers.

# bench_setup DEBIAN_PACKAGE... : installs missing packages, builds the release agent (AGENT), makes $work.
bench_setup() {
  local missing=() p
  for p in "$@"; do
    command -v "$p" >/dev/null 2>&1 || missing+=("$p")  # each package's command has its name
  done
  if [ ${#missing[@]} -gt 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
  cargo build --release --bin foothold-agent -q
  AGENT=$(pwd)/target/release/foothold-agent
  work=$(mktemp -d "${TMPDIR:-/tmp}/foothold-bench.XXXXXX")
  pids=()
  trap bench_cleanup EXIT
}
bench_cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_http() { for _ in $(seq 1 200); do curl -sf -o /dev/null "$1" && return 0; sleep 0.05; done; echo "no answer from $1" >&2; exit 1; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a/b}'; }

# start_nginx DIR : nginx with sendfile serving DIR on a free port (NGINX_PORT), the physical reference.
start_nginx() {
  NGINX_PORT=$(free_port)
  mkdir -p "$work/nginx"
  cat > "$work/nginx/nginx.conf" <<CONF
user root; daemon off; worker_processes 2; pid $work/nginx/pid; error_log $work/nginx/error.log;
events { worker_connections 4096; }
http { sendfile on; tcp_nopush on; access_log off; client_body_temp_path $work/nginx/body; proxy_temp_path $work/nginx/proxy;
  fastcgi_temp_path $work/nginx/fcgi; uwsgi_temp_path $work/nginx/uwsgi; scgi_temp_path $work/nginx/scgi;
  server { listen 127.0.0.1:$NGINX_PORT; root $1; } }
CONF
  nginx -c "$work/nginx/nginx.conf" -p "$work/nginx" & pids+=("$!")
}

# make_random_file PATH MIB : PATH filled with MIB MiB of seeded random bytes; prints its sha256 digest.
make_random_file() {
  mkdir -p "$(dirname "$1")"
  python3 - "$1" "$2" <<'PY'
import hashlib, random, sys
path, mib = sys.argv[1], int(sys.argv[2])
rng, h, left = random.Random(path), hashlib.sha256(), mib << 20
with open(path, "wb") as f:
    while left:
        chunk = rng.randbytes(min(left, 4 << 20)); h.update(chunk); f.write(chunk); left -= len(chunk)
print("sha256:" + h.hexdigest())
PY
}

# make_layout DIR MIB LAYERS REF : an OCI image layout in DIR holding one image REF of LAYERS random layers,
# MIB MiB in all (the layers are not tar: registries and `ctr content fetch` do not look inside).
make_layout() {
  python3 - "$@" <<'PY'
import hashlib, json, os, random, sys
lay, mib, n, ref = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
rng = random.Random(lay)
os.makedirs(f"{lay}/blobs/sha256")
open(f"{lay}/oci-layout", "w").write('{"imageLayoutVersion":"1.0.0"}')
def put(b):
    d = hashlib.sha256(b).hexdigest(); open(f"{lay}/blobs/sha256/{d}", "wb").write(b); return "sha256:" + d
layers = []
for i in range(n):
    size, h, tmp = (mib << 20) // n, hashlib.sha256(), f"{lay}/blobs/sha256/tmp"
    with open(tmp, "wb") as f:
        left = size
        while left:
            chunk = rng.randbytes(min(left, 4 << 20)); h.update(chunk); f.write(chunk); left -= len(chunk)
    os.rename(tmp, f"{lay}/blobs/sha256/{h.hexdigest()}")
    layers.append({"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": "sha256:" + h.hexdigest(), "size": size})
cfg = json.dumps({"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": [l["digest"] for l in layers]}}).encode()
m = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
    "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": put(cfg), "size": len(cfg)}, "layers": layers}).encode()
md = put(m)
json.dump({"schemaVersion": 2, "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": md, "size": len(m),
    "annotations": {"org.opencontainers.image.ref.name": ref}}]}, open(f"{lay}/index.json", "w"))
PY
}

# start_containerd DIR : a containerd of its own in DIR (root, state, sockets; the CRI plugin off), in the
# background (CTRD_PID); wait_containerd DIR waits until it answers on DIR/sock.
start_containerd() {
  mkdir -p "$1"
  cat > "$1/config.toml" <<TOML
version = 2
root = "$1/root"
state = "$1/state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "$1/sock"
[ttrpc]
  address = "$1/sock.ttrpc"
TOML
  containerd --config "$1/config.toml" 2>"$1/log" & CTRD_PID=$!; pids+=("$CTRD_PID")
}
wait_containerd() {
  for _ in $(seq 200); do ctr --address "$1/sock" version >/dev/null 2>&1 && return 0; sleep 0.05; done
  echo "containerd in $1 did not answer:" >&2; cat "$1/log" >&2; exit 1
}

# ctr_fetch DIR REF [FETCH_ARGS...] : the containerd in DIR fetches REF (`ctr content fetch`: every blob, nothing
# unpacked), ctr's log in DIR/fetch.log, shown if the fetch fails. `--debug` is there to turn off ctr's progress
# display: it asks the content store for every blob's status ten times a second, and once the fetch is done it
# holds ctr's exit until its next 100 ms tick, which made a 4 s pull's time come in 2.5 % steps.
ctr_fetch() {
  local dir=$1 ref=$2; shift 2
  ctr --debug --address "$dir/sock" --namespace bench content fetch "$@" "$ref" >"$dir/fetch.log" 2>&1 ||
    { echo "ctr could not fetch $ref:" >&2; cat "$dir/fetch.log" >&2; return 1; }
}

# start_agent_at DIR [SERVE_ARGS...] / start_dist_at DIR : a fresh foothold-agent (release) or CNCF
# distribution on a free port with its data in DIR, emptied first; set AGENT_PORT/AGENT_PID or DIST_PORT/DIST_PID.
# serve_agent_at and serve_dist_at do the same on DIR as it is.
start_agent_at() { rm -rf "$1"; serve_agent_at "$@"; }
start_dist_at() { rm -rf "$1"; serve_dist_at "$1"; }
serve_agent_at() {
  local dir=$1; shift
  AGENT_PORT=$(free_port)
  "$AGENT" serve --no-controllers --listen "127.0.0.1:$AGENT_PORT" --data "$dir" "$@" 2>>"$dir.log" & AGENT_PID=$!; pids+=("$AGENT_PID")
  wait_http "http://127.0.0.1:$AGENT_PORT/v2/"
}
serve_dist_at() {
  DIST_PORT=$(free_port)
  cat > "$1.yml" <<YML
version: 0.1
log: {level: error}
storage: {filesystem: {rootdirectory: $1}, delete: {enabled: true}}
http: {addr: 127.0.0.1:$DIST_PORT}
YML
  docker-registry serve "$1.yml" >>"$1.log" 2>&1 & DIST_PID=$!; pids+=("$DIST_PID")
  wait_http "http://127.0.0.1:$DIST_PORT/v2/"
}
