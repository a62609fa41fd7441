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
