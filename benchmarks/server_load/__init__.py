"""Load on the reward server over loopback: how near the judge's own limit it gets, batching vs none, faults.

1. Throughput, equal work (`throughput`): every judge call generates exactly `--max-new-tokens` tokens
   (`min_new_tokens` in the served tiny Qwen2.5-VL's generation config, transformers backend), each request
   two responses and a small image (one MC item, two display orders).
   - Near the limit: the judge `mrjudge serve` builds from the same flags (`mrjudge.serve_cmd.served_judge`)
     runs in this process (`inprocess`), the same requests in batches of `--max-batch-items` through
     `compute_rewards` (what the server's batch worker runs; requests read and images decoded as the server
     does), against the server loaded by `--saturation-clients` closed-loop clients (default 2 x
     max-batch-items, so a full batch always waits), in `--efficiency-rounds` (6) rounds of two windows of
     `--duration / 3` s each, the order turned every round (in process first, then the server first, ...),
     so that other work on the machine, and its drift, weigh on both alike.
     `server_efficiency` = server_judgments_per_s / inprocess_judgments_per_s;
     `server_cpu_efficiency` compares judgments per CPU-second of each process (what the HTTP front costs,
     whatever share of the cores the machine leaves), `server_front_cpu_ms_per_judgment` the event loop
     thread's own CPU (HTTP, JSON, checks, image decoding: what the judge's cores give up to the front);
     `server_mean_batch_requests` and
     `server_judge_busy_frac` (from the answers' timings) say whether batches were full and the judge busy;
     `inprocess_judge_ms_per_batch` and `server_judge_ms_per_batch` time the judge call alone (the same full
     batch), so a judge that runs slower beside the server's event loop (one GIL) shows there.
   - Batching: `--clients` clients against a server with dynamic batching and one with `--no-batching`, both
     up at once, in `--batching-rounds` (4) rounds of a `--duration / rounds` s window on each, the order
     turned every round; `ratio` is the pooled windows' judgments/s, `ratio_by_round` each round's (one 20 s
     window a side, one after the other, read 5.0, 4.2 and 5.5 in three bare runs).
   Judgments/s is answered MC items per second; latency is per request. The clients speak plain HTTP/1.1 on
   kept-alive sockets (`raw_http`): httpx cost ~7 ms of CPU a request on the cores the server needs (it, not
   the server, capped the load at ~50 requests/s); `server_client_cpu_s_per_s` reports what they use now.
2. Faults (`faults`): `--fault-requests` requests (10 % bad: invalid base64, truncated JSON, wrong types,
   oversized image, decompression bomb, 100 candidates, missing or wrong key) to a server with an API key
   whose judge is the instant rule judge (`instant_server`: `tiny_world.rule_judge`), so the run measures the
   server and not the model. Every bad request must get a 4xx, every good one a 200; the server's RSS (VmRSS
   of the subprocess) is compared before and after. The server logs at `mrjudge serve`'s default level (info)
   to a file: `fault_log_lines` counts the lines it wrote from the timed run's start to its exit, and
   `refused_log_lines_per_1000` per 1,000 bad requests (refusals and unscored samples are summarised, at
   most a line per reason per `log_interval_s`, never a line each).
3. Hostile (`hostile`): the same instant judge (plus `--judge-delay-ms` per backend call) at default limits,
   good clients alone for `--hostile-duration` s, then good clients with `--hostile-clients` hostile ones for
   as long: bomb-like images (8 one-bit 16-megapixel PNGs), a 200-query `/get_reward` (19,900 items), lone
   surrogates in values and keys, TIFF / EPS / text data URLs, a 100k-character `mode`, unknown item
   fields, a 10 MB JSON body of 3.3 million zeros, a body sent a byte at a time, and a 1,770-item job whose
   client hangs up.
   Reports `hostile_5xx` (must be 0), the server's peak RSS growth (VmHWM over VmRSS at the start of the
   phase), p99 of the good requests with and without the hostile traffic, and the time from SIGTERM to
   exit with all of it still running (`shutdown_grace_s` 5).

    python -m benchmarks.server_load [--duration 20] [--clients 32] [--fault-requests 10000] [--max-new-tokens 16]
    python -m benchmarks.server_load --skip-faults --skip-hostile --duration 12   # the near-the-limit figures only
    python -m benchmarks.server_load --skip-throughput --skip-faults --hostile-duration 10   # the hostile run

Every server's stderr goes to a file (`benchmarks.kit.start_server`), never a pipe nobody drains. Run time: the
bare run took 241 s on 2 shared cores: the efficiency run (six rounds of two ~6.7 s windows) and the batching
run (four rounds of two 5 s windows), each with its servers' start, the 10,000-request fault run at 196–249 requests/s, and two 20 s
hostile phases. Prints one JSON line (`__main__`); the requests each run sends are in `bodies`.
"""
