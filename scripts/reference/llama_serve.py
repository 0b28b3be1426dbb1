#!/usr/bin/env python3
"""llama-server launched with the flags `vram-lab plan --engine llama.cpp` chose, on an emulated
card: this process holds a ballast of device memory (cuMemAlloc, outside llama.cpp) so that the
card's MiB are what is left free, then starts llama-server with the plan's flags, waits for it to
load, sends one completion whose prompt fills the context (token ids; 8 tokens generated), and
records whether it loaded and answered, and the largest figure nvidia-smi listed for it.

    python3 scripts/reference/llama_serve.py --plans PLANS.csv --gguf-dir WORK --server BIN --out DIR

PLANS.csv is scripts/gpu/llamacpp_serve_plans.sh's output. DIR gets server_launches.csv (not launches.csv: that name is llama-completion's grid) and one log per
launch. Every process this script starts is stopped by the id it recorded.
"""

import argparse
import csv
import ctypes
import json
import os
import subprocess
import threading
import time
import urllib.request

MIB = 1 << 20
PORT = 8093


class Ballast:
    """Device memory held outside llama.cpp, so that `card_mib` is what the card has free."""

    def __init__(self):
        self.cuda = ctypes.CDLL("libcuda.so.1")
        self.cuda.cuInit(0)
        dev = ctypes.c_int()
        self.cuda.cuDeviceGet(ctypes.byref(dev), 0)
        self.ctx = ctypes.c_void_p()
        self.cuda.cuDevicePrimaryCtxRetain(ctypes.byref(self.ctx), dev)
        self.cuda.cuCtxSetCurrent(self.ctx)
        self.ptr = None

    def free_bytes(self):
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        self.cuda.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total))
        return free.value

    def hold(self, card_mib):
        if self.ptr is not None:
            self.cuda.cuMemFree_v2(self.ptr)
            self.ptr = None
        want = int(card_mib * MIB)
        extra = self.free_bytes() - want
        if extra > 0:
            self.ptr = ctypes.c_uint64()
            rc = self.cuda.cuMemAlloc_v2(ctypes.byref(self.ptr), ctypes.c_size_t(extra))
            if rc != 0:
                raise SystemExit(f"cannot hold a ballast of {extra / MIB:.0f} MiB (CUresult {rc})")
        return self.free_bytes()


def smi_used(pid):
    out = subprocess.run(
        ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
        capture_output=True, text=True,
    ).stdout
    for line in out.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0] == str(pid):
            return int(parts[1])
    return 0


def get(path, timeout=5):
    with urllib.request.urlopen(f"http://127.0.0.1:{PORT}{path}", timeout=timeout) as r:
        return r.status


def launch(row, args, i):
    gguf = os.path.join(args.gguf_dir, f"{row['preset']}-{row['type']}.gguf")
    log_path = os.path.join(args.out, f"launch-{i}.log")
    cmd = [args.server, "-m", gguf, "-c", row["ctx"], "-ngl", row["ngl"], "-fa", "on", "-ctk", row["ctk"],
           "-ctv", row["ctv"], "-b", row["batch"], "-ub", row["ubatch"], "-np", "1", "-fit", "off",
           "--host", "127.0.0.1", "--port", str(PORT), "-lv", "4"]
    # A mixture's plan keeps the first layers' experts in host memory.
    if row.get("ncmoe"):
        cmd += ["--n-cpu-moe", row["ncmoe"]]
    rec = dict(row, id=i, loaded=0, http=0, alive=0, smi_peak_mib=0, seconds=0.0)
    t0 = time.time()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        peak = [0]
        done = threading.Event()

        def watch():
            while not done.is_set():
                peak[0] = max(peak[0], smi_used(proc.pid))
                time.sleep(0.05)

        watcher = threading.Thread(target=watch)
        watcher.start()
        try:
            while time.time() - t0 < args.load_timeout and proc.poll() is None:
                try:
                    if get("/health") == 200:
                        rec["loaded"] = 1
                        break
                except Exception:
                    pass
                time.sleep(0.5)
            if rec["loaded"]:
                n = int(row["ctx"]) - 16
                ids = [7 + (k * 37) % 5000 for k in range(n)]
                body = json.dumps({"prompt": ids, "n_predict": 8, "cache_prompt": False, "temperature": 0}).encode()
                req = urllib.request.Request(f"http://127.0.0.1:{PORT}/completion", data=body,
                                             headers={"Content-Type": "application/json"})
                try:
                    with urllib.request.urlopen(req, timeout=args.request_timeout) as r:
                        rec["http"] = r.status
                except urllib.error.HTTPError as e:
                    rec["http"] = e.code
                except Exception:
                    rec["http"] = -1
                rec["alive"] = int(proc.poll() is None)
        finally:
            done.set()
            watcher.join()
            if proc.poll() is None:
                proc.terminate()  # the server this script started, by its Popen handle
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
    rec["rc"] = proc.returncode
    rec["smi_peak_mib"] = peak[0]
    rec["seconds"] = round(time.time() - t0, 1)
    text = open(log_path, errors="replace").read()
    rec["oom"] = int("out of memory" in text.lower())
    return rec


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--plans", required=True)
    ap.add_argument("--gguf-dir", required=True)
    ap.add_argument("--server", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--load-timeout", type=float, default=240)
    ap.add_argument("--request-timeout", type=float, default=300)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rows = list(csv.DictReader(open(args.plans)))
    ballast = Ballast()
    fields = list(rows[0].keys()) + ["id", "free_mib", "loaded", "http", "alive", "rc", "oom", "smi_peak_mib", "seconds"]
    with open(os.path.join(args.out, "server_launches.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        for i, row in enumerate(rows, 1):
            free = ballast.hold(float(row["card_mib"]))
            rec = launch(row, args, i)
            rec["free_mib"] = round(free / MIB, 1)
            w.writerow({k: rec.get(k, "") for k in fields})
            f.flush()
            print(json.dumps({k: rec[k] for k in ("id", "preset", "type", "card", "ctx", "ctk", "loaded", "http", "alive", "oom", "smi_peak_mib", "predicted_mib", "seconds")}), flush=True)


if __name__ == "__main__":
    main()
