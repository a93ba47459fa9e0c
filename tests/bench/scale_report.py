#!/usr/bin/env python3
"""The figures of the scale test (scale_test.sh), a plot of them, and the check of a results file.

  scale_report.py row DIR N STARTS_S ALL_IDLE_S SLURMCTLD_CPU_S KEY_ACCEPTED KEY_REFUSED RECONCILE_S ELASTIC_S
      one tab-separated line of figures for size N (STARTS_S: how long the lab took to start
      the N containers, one after the other), from what scale_test.sh saved in DIR:
        NAME.t0      when the worker's container started (nspawn, epoch seconds)
        NAME.vmid    its VM id in the OneGate simulator
        NAME.json    its one-hpc-configure journal (journalctl -o json)
        requests.json       the simulator's request log (GET /_sim/requests) since the start
        key-server.json     the controller's journal of one-hpc-key-server@*.service instances
        controller.vmid
  scale_report.py show RESULTS N     the line of size N, one figure per line
  scale_report.py plot RESULTS SVG   the figures against N, as an SVG picture (no dependency)

A worker's join, from its own journal (each step ends at a line one-hpc logs):
  boot       container started -> the first line of one-hpc-configure (systemd boots, the
             context is read by the unit's start)
  discover   -> "worker: controller ... at ..." (the context, OneGate's reads of the service,
             the controller's VM and this VM)
  key        -> "op(N): fetch the munge key ... [finished]" (the key server's answer, munged
             restarted) or, when no fetch was needed, the discover time
  register   -> "worker: node ... registered" (slurmd started and slurmctld lists the node)
  join       container started -> registered
Per size: the median (p50) and the 95th percentile (p95, nearest rank) over the workers.
OneGate requests and bytes of a join: the simulator's log of that VM up to its READY=YES (the
requests after it are its follow passes, every 30 s).
"""
import json
import math
import os
import sys

COLUMNS = [
    "size", "starts_s", "all_idle_s", "joins",
    "join_p50_s", "join_p95_s", "boot_p50_s", "boot_p95_s", "discover_p50_s", "discover_p95_s",
    "key_p50_s", "key_p95_s", "register_p50_s", "register_p95_s",
    "onegate_req_per_join_max", "onegate_bytes_per_join_p50", "onegate_bytes_per_join_max",
    "onegate_req_total", "onegate_bytes_total",
    "key_max_concurrent", "key_answers", "key_refused", "key_answer_p50_s", "key_answer_p95_s",
    "slurmctld_cpu_s", "reconcile_s", "elastic_s",
]


def header():
    return "\t".join(COLUMNS)


def pct(values, p):
    """Nearest-rank percentile; None for no values."""
    if not values:
        return None
    v = sorted(values)
    k = max(1, math.ceil(p / 100.0 * len(v)))
    return v[k - 1]


def entries(path):
    """The entries of a journalctl -o json file: (epoch seconds, message, the whole entry)."""
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            e = json.loads(line)
            msg = e.get("MESSAGE", "")
            if isinstance(msg, list):  # journald gives non-UTF-8 messages as a byte array
                msg = bytes(msg).decode("utf-8", "replace")
            yield int(e["__REALTIME_TIMESTAMP"]) / 1e6, msg, e


def journal(path):
    """[(epoch seconds, message)] of a journalctl -o json file."""
    return [(t, msg) for t, msg, _ in entries(path)]


def first(entries, pred):
    for t, m in entries:
        if pred(m):
            return t
    return None


def join_steps(t0, entries):
    """The step durations of one worker's join, or None when it did not register."""
    if not entries:
        return None
    start = entries[0][0]
    found = first(entries, lambda m: m.startswith("worker: controller "))
    key = first(entries, lambda m: "fetch the munge key" in m and "[finished]" in m)
    reg = first(entries, lambda m: m.startswith("worker: node ") and " registered " in m)
    if found is None or reg is None:
        return None
    if key is None:
        key = found
    return {"join": reg - t0, "boot": start - t0, "discover": found - start,
            "key": key - found, "register": reg - key}


def key_answers(path):
    """Seconds from the start to the end of each key server instance (one per connection): from
    systemd's "Started" (the process runs) to its "Deactivated successfully"."""
    started, times = {}, []
    for t, msg, e in entries(path):
        unit = e.get("UNIT") or e.get("_SYSTEMD_UNIT") or ""
        if not unit.startswith("one-hpc-key-server@"):
            continue
        # "Started ..." (the job of starting it is done: the process runs; a Type=simple unit
        # logs no "Starting ..." line).
        if e.get("JOB_TYPE") == "start" and unit not in started:
            started[unit] = t
        code = e.get("MESSAGE_ID", "")
        # "Deactivated successfully" (unit stopped) or "Finished": the answer is given.
        if unit in started and (code == "7ad2d189f7e94e70a38c781354912448"
                                or msg.endswith("Deactivated successfully.")):
            times.append(t - started.pop(unit))
    return times


def row(d, n, starts, all_idle, cpu, accepted, refused, reconcile, elastic):
    steps = {k: [] for k in ("join", "boot", "discover", "key", "register")}
    ids = {}
    joins = 0
    for f in sorted(os.listdir(d)):
        if not f.endswith(".t0"):
            continue
        name = f[:-3]
        t0 = float(open(os.path.join(d, f)).read().strip())
        ids[int(open(os.path.join(d, name + ".vmid")).read().strip())] = name
        s = join_steps(t0, journal(os.path.join(d, name + ".json")))
        if s is None:
            continue
        joins += 1
        for k, v in s.items():
            steps[k].append(v)
    reqs = json.load(open(os.path.join(d, "requests.json")))
    per_vm = {i: [0, 0] for i in ids}
    total_req = total_bytes = 0
    ready = set()  # the VMs whose join has ended (READY=YES published): later requests are
    #                their follow passes (every 30 s), not the join
    for r in reqs:
        total_req += 1
        total_bytes += r.get("response_bytes", 0)
        vm = r.get("vm_id")
        if vm in per_vm and vm not in ready:
            per_vm[vm][0] += 1
            per_vm[vm][1] += r.get("response_bytes", 0)
            if r.get("method") == "PUT" and "READY%3DYES" in (r.get("body") or ""):
                ready.add(vm)
    conc = [int(x) for x in open(os.path.join(d, "nconnections")).read().split() if x.isdigit()] \
        if os.path.exists(os.path.join(d, "nconnections")) else []
    answers = key_answers(os.path.join(d, "key-server.json"))

    def fmt(v, digits=2):
        return "" if v is None else (f"{v:.{digits}f}" if isinstance(v, float) else str(v))

    vals = [n, starts, all_idle, joins]
    for k in ("join", "boot", "discover", "key", "register"):
        vals += [fmt(pct(steps[k], 50)), fmt(pct(steps[k], 95))]
    vals += [max((c for c, _ in per_vm.values()), default=0),
             pct([b for _, b in per_vm.values()], 50) or 0,
             max((b for _, b in per_vm.values()), default=0),
             total_req, total_bytes,
             max(conc, default=0), accepted, refused,
             fmt(pct(answers, 50)), fmt(pct(answers, 95)),
             cpu, reconcile, elastic]
    return "\t".join(str(v) for v in vals)


def read_results(path):
    with open(path) as f:
        lines = [l.rstrip("\n").split("\t") for l in f if l.strip() and not l.startswith("#")]
    head, rows = lines[0], lines[1:]
    return [dict(zip(head, r)) for r in rows]


def show(path, n):
    for r in read_results(path):
        if r["size"] == str(n):
            for k in COLUMNS:
                print(f"{k:28} {r.get(k, '')}")
            return 0
    print(f"no line for size {n} in {path}", file=sys.stderr)
    return 1


def plot(path, out):
    """Four panels against N: all-idle time and join p50/p95; bytes per join; key server;
    cycles' wall time. Plain SVG."""
    rows = read_results(path)
    xs = [int(r["size"]) for r in rows]
    panels = [
        ("From the first start to all nodes idle, and one join (s)",
         [("all idle", "all_idle_s"), ("the lab starting the N containers", "starts_s"),
          ("join p95", "join_p95_s"), ("join p50", "join_p50_s")]),
        ("Join steps, 95th percentile (s)",
         [("boot", "boot_p95_s"), ("discover", "discover_p95_s"), ("key", "key_p95_s"),
          ("register", "register_p95_s")]),
        ("OneGate kB per join (largest) and slurmctld CPU for all joins (s)",
         [("OneGate kB per join", "onegate_bytes_per_join_max", 1000.0),
          ("slurmctld CPU s", "slurmctld_cpu_s")]),
        ("Cycle wall time with N live nodes (s)",
         [("reconcile", "reconcile_s"), ("elastic", "elastic_s")]),
    ]
    colors = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"]
    W, H, pw, ph = 1040, 760, 420, 270
    out_svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
               'font-family="sans-serif" font-size="12">',
               f'<rect width="{W}" height="{H}" fill="white"/>']
    machine = os.environ.get("SCALE_MACHINE", "")
    service = "Open OnDemand" if os.environ.get("SCALE_SERVICE") == "ood" else "OneSlurm"
    out_svg.append(f'<text x="20" y="22" font-size="15">one-hpc {service} at scale: N workers '
                   f'joining together (container lab) {machine}</text>')
    for i, (title, series) in enumerate(panels):
        ox, oy = 60 + (i % 2) * (pw + 90), 60 + (i // 2) * (ph + 90)
        data = []
        for s in series:
            label, col = s[0], s[1]
            div = s[2] if len(s) > 2 else 1.0
            pts = [(x, float(r[col]) / div) for x, r in zip(xs, rows) if r.get(col, "") != ""]
            data.append((label, pts))
        ymax = max([y for _, p in data for _, y in p] + [1e-9]) * 1.1
        xmax = max(xs + [1])
        out_svg.append(f'<text x="{ox}" y="{oy - 10}" font-size="13">{title}</text>')
        out_svg.append(f'<rect x="{ox}" y="{oy}" width="{pw}" height="{ph}" fill="none" stroke="#888"/>')
        for k in range(5):
            y = oy + ph - k * ph / 4
            out_svg.append(f'<text x="{ox - 6}" y="{y + 4}" text-anchor="end">{ymax * k / 4:.3g}</text>')
            out_svg.append(f'<line x1="{ox}" y1="{y}" x2="{ox + pw}" y2="{y}" stroke="#eee"/>')
        for x in xs:
            px = ox + pw * x / xmax
            out_svg.append(f'<text x="{px}" y="{oy + ph + 16}" text-anchor="middle">{x}</text>')
        out_svg.append(f'<text x="{ox + pw / 2}" y="{oy + ph + 32}" text-anchor="middle">N (workers)</text>')
        for j, (label, pts) in enumerate(data):
            c = colors[j % len(colors)]
            path = " ".join(f"{ox + pw * x / xmax:.1f},{oy + ph - ph * y / ymax:.1f}" for x, y in pts)
            if pts:
                out_svg.append(f'<polyline points="{path}" fill="none" stroke="{c}" stroke-width="2"/>')
            for x, y in pts:
                out_svg.append(f'<circle cx="{ox + pw * x / xmax:.1f}" cy="{oy + ph - ph * y / ymax:.1f}" r="3" fill="{c}"/>')
            out_svg.append(f'<text x="{ox + 8}" y="{oy + 16 + 15 * j}" fill="{c}">{label}</text>')
    out_svg.append("</svg>")
    with open(out, "w") as f:
        f.write("\n".join(out_svg) + "\n")
    return 0


def main(argv):
    if len(argv) >= 2 and argv[1] == "header":
        print(header())
        return 0
    if len(argv) == 11 and argv[1] == "row":
        print(row(argv[2], int(argv[3]), *argv[4:11]))
        return 0
    if len(argv) == 4 and argv[1] == "show":
        return show(argv[2], argv[3])
    if len(argv) == 4 and argv[1] == "plot":
        return plot(argv[2], argv[3])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
