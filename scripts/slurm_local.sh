#!/usr/bin/env bash
# A single-node Slurm on this machine, for the tests of `modformer sweep --launcher slurm`:
#
#   bash scripts/slurm_local.sh install   # Debian packages (root); nothing else
#   bash scripts/slurm_local.sh start     # install if needed, then start the daemons
#   bash scripts/slurm_local.sh env       # the line to source: export SLURM_CONF=...
#   bash scripts/slurm_local.sh stop      # stop the daemons `start` started, by their recorded pids
#
# Everything lives in one private folder, $MODFORMER_SLURM_DIR (default /tmp/modformer-slurm):
# configs, munge key and socket, MariaDB's data, Slurm's state, logs, and one pid file per
# daemon. Nothing under /etc is written, no systemd and no cgroups are needed, and ports on the
# loopback address only. Clients find this cluster through SLURM_CONF (the `env` line).
# Slurm's state is kept between stop and start: job ids keep counting up, so a submitit folder
# never meets an old job's id again, and a warm start takes seconds.
#
# Exit status 77: Slurm is not installed and cannot be (not root, or no apt-get); the tests skip.
set -euo pipefail

dir=${MODFORMER_SLURM_DIR:-/tmp/modformer-slurm}
# Ports away from Slurm's defaults (6817-6819), so a real Slurm on the machine is left alone.
base_port=${MODFORMER_SLURM_PORT:-16817}
ctld_port=$base_port slurmd_port=$((base_port + 1)) dbd_port=$((base_port + 2)) db_port=$((base_port + 3))
packages=(slurmctld slurmd slurm-client slurmdbd munge mariadb-server)
daemons=(munged mariadbd slurmdbd slurmctld slurmd)  # start order; stopped in reverse

say() { echo "slurm_local: $*" >&2; }

installed() {
  command -v slurmctld && command -v slurmd && command -v slurmdbd && command -v sbatch \
    && command -v munged && command -v mariadbd && command -v mariadb-install-db
} >/dev/null 2>&1

install() {
  installed && return 0
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    say "Slurm is not installed, and only root with apt-get can install it (${packages[*]})"
    exit 77
  fi
  say "installing ${packages[*]} ..."
  # No service may start during the installation (there is no systemd; we start our own
  # daemons): a policy-rc.d that refuses, unless the machine already has one.
  local policy=/usr/sbin/policy-rc.d own_policy=0
  if [ ! -e "$policy" ]; then printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod +x "$policy" && own_policy=1; fi
  # Quietly and without man pages (the man-db trigger alone takes many seconds).
  local ok=0
  export DEBIAN_FRONTEND=noninteractive
  { apt-get install -y -qq --no-install-recommends -o Dpkg::Options::=--path-exclude=/usr/share/man/* \
      -o Dpkg::Options::=--path-exclude=/usr/share/doc/* "${packages[@]}" >"$dir/install.log" 2>&1 \
    || { apt-get update -qq >>"$dir/install.log" 2>&1 && apt-get install -y -qq --no-install-recommends \
           "${packages[@]}" >>"$dir/install.log" 2>&1; }; } && ok=1
  [ $own_policy = 1 ] && rm -f "$policy"
  if [ $ok != 1 ]; then say "apt-get failed (see $dir/install.log)"; tail -5 "$dir/install.log" >&2; exit 1; fi
}

pid_of() { cat "$dir/pids/$1.pid" 2>/dev/null || true; }

# A recorded pid counts only while it is still that daemon (a pid can be reused).
alive() {
  local pid; pid=$(pid_of "$1")
  [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q "$1"
}

wait_for() {  # wait_for WHAT SECONDS COMMAND...: until COMMAND succeeds
  local what=$1 seconds=$2; shift 2
  local end=$((SECONDS + seconds))
  until "$@" >/dev/null 2>&1; do
    if [ $SECONDS -ge $end ]; then say "$what did not come up within ${seconds}s (logs in $dir/log)"; return 1; fi
    sleep 0.2
  done
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

launch() {  # launch NAME COMMAND...: start a daemon in the foreground of its own session, record its pid
  local name=$1; shift
  alive "$name" && return 0
  setsid "$@" >"$dir/log/$name.out" 2>&1 </dev/null 9>&- &  # (9: the lock, not for daemons)
  echo $! >"$dir/pids/$name.pid"
}

write_configs() {
  local host cpus mem_mb
  host=$(hostname -s)
  cpus=$(nproc)
  mem_mb=$(awk '/MemTotal/ {print int($2 / 1024 * 0.9)}' /proc/meminfo)
  cat >"$dir/etc/slurm.conf" <<EOF
# Written by scripts/slurm_local.sh: a single-node cluster for tests.
ClusterName=modformer
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
AuthType=auth/munge
AuthInfo=socket=$dir/run/munge.socket
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
# No cgroups here: processes are tracked through /proc, tasks are not bound to cores.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
# Accounting: submitit learns a job's end (a cancelled one's too) from sacct.
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$dbd_port
# (the munge socket of the connection to slurmdbd: AuthInfo does not cover it)
AccountingStoragePass=$dir/run/munge.socket
JobCompType=jobcomp/none
# A job starts about 1 s after submission instead of 3.
SchedulerParameters=batch_sched_delay=0
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
KillWait=10
InactiveLimit=0
MinJobAge=300
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
  cat >"$dir/etc/slurmdbd.conf" <<EOF
AuthType=auth/munge
AuthInfo=socket=$dir/run/munge.socket
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$dbd_port
SlurmUser=root
PidFile=$dir/run/slurmdbd.pid
LogFile=$dir/log/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$db_port
StorageUser=root
StorageLoc=slurm_acct_db
EOF
  chmod 600 "$dir/etc/slurmdbd.conf"  # slurmdbd refuses a config others can read
}

start() {
  mkdir -p "$dir"/{etc,run,log,pids,state,spool,munge}
  exec 9>"$dir/lock"
  flock 9  # one start (or install) at a time: parallel test workers call this too
  install
  if [ "$(id -u)" != 0 ]; then say "starting Slurm's daemons needs root"; exit 77; fi
  write_configs
  export SLURM_CONF=$dir/etc/slurm.conf
  [ -s "$dir/munge/munge.key" ] || { dd if=/dev/urandom bs=1 count=1024 of="$dir/munge/munge.key" 2>/dev/null
                                     chmod 400 "$dir/munge/munge.key"; }
  chmod 700 "$dir/munge" "$dir/run"
  launch munged munged --foreground --force --key-file="$dir/munge/munge.key" --socket="$dir/run/munge.socket" \
    --pid-file="$dir/run/munged.pid" --log-file="$dir/log/munged.log" --seed-file="$dir/munge/munged.seed"
  if [ ! -d "$dir/mysql/mysql" ]; then
    mariadb-install-db --datadir="$dir/mysql" --user=root --auth-root-authentication-method=normal \
      --skip-test-db >"$dir/log/mariadb-install.log" 2>&1 || { say "mariadb-install-db failed"; exit 1; }
  fi
  # Loopback only, and without grant tables: the only client is our slurmdbd.
  launch mariadbd mariadbd --no-defaults --datadir="$dir/mysql" --user=root --bind-address=127.0.0.1 \
    --port=$db_port --socket="$dir/run/mysqld.sock" --pid-file="$dir/run/mysqld.pid" --skip-grant-tables \
    --skip-name-resolve --innodb-buffer-pool-size=32M --log-error="$dir/log/mariadb.log"
  wait_for munged 10 test -S "$dir/run/munge.socket"
  wait_for MariaDB 60 port_open $db_port
  launch slurmdbd slurmdbd -D
  wait_for slurmdbd 30 port_open $dbd_port
  local fresh=1
  alive slurmctld && fresh=0
  launch slurmctld slurmctld -D -i
  wait_for slurmctld 30 scontrol ping
  launch slurmd slurmd -D -N "$(hostname -s)"
  if [ $fresh = 1 ]; then
    # Jobs in the kept state belong to an earlier start whose daemons died or were stopped
    # mid-job (a killed test run): Slurm would requeue them onto this node. This cluster is
    # ours alone, so they are cancelled, by their arrays' job ids (%A: %i writes a throttled
    # array's pending tasks as 52_[2-3%2], which scancel refuses; --quiet: a job that ends
    # meanwhile is no error). A failure stops the start: a job left over would run again
    # on this node beside the tests' own.
    local ids
    ids=$(squeue -h -o %A | sort -u) || { say "squeue failed: cannot list the kept jobs to cancel them"; exit 1; }
    if [ -n "$ids" ]; then
      # shellcheck disable=SC2086  # one id per word
      scancel --quiet $ids || { say "scancel of the kept jobs $(echo $ids) failed (see $dir/log)"; exit 1; }
    fi
  fi
  # A node still completing such a job takes a minute (Slurm resends the termination).
  wait_for "the node" 120 bash -c "sinfo -h -N -o %T | grep -qE '^(idle|mixed|allocated)'"
  wait_for accounting 30 sacct -n -X -S now
  say "running (SLURM_CONF=$SLURM_CONF)"
}

stop() {
  local name pid i
  for ((i = ${#daemons[@]} - 1; i >= 0; i--)); do
    name=${daemons[i]}
    if alive "$name"; then
      pid=$(pid_of "$name")
      kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 100); do alive "$name" || break; sleep 0.1; done
      alive "$name" && kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$dir/pids/$name.pid"
  done
  say "stopped"
}

case "${1:-}" in
  install) mkdir -p "$dir"; exec 9>"$dir/lock"; flock 9; install ;;
  start) start ;;
  stop) stop ;;
  status) for name in "${daemons[@]}"; do alive "$name" && echo "$name $(pid_of "$name")" || echo "$name -"; done ;;
  env) echo "export SLURM_CONF=$dir/etc/slurm.conf" ;;
  *) echo "usage: $0 install|start|stop|status|env" >&2; exit 2 ;;
esac
