#!/usr/bin/env bash
# `ferry run`'s monitoring on the simulator tells the truth: with two copy streams the engines
# are busy at most 100% and overlap is at most 3, with no bandwidth alert on a healthy run;
# --single-stream labels its one stream "all" (not D2H) in text and JSON; the link line never
# gives this run more traffic than the link's total.
. "$(dirname "$0")/lib.sh"

expect_rc "two copy streams" 0 "$FERRY" run --bytes 256M --copy-streams 2 --chunk-bytes 4M --json
json_check "two copy streams: engines at most 100%, overlap at most 3, no alert" "$TMP/out" \
  "j['util_h2d'] <= 1.0 and j['util_d2h'] <= 1.0 and j['overlap'] <= 3.0 and j['bw_alerts'] == 0 and j['gbps_h2d'] > 40"

expect_rc "single stream, text" 0 "$FERRY" run --bytes 32M --single-stream
expect_in "single stream: one stream, all ops" "$TMP/out" "0:all "
expect_not_in "single stream: not labelled D2H" "$TMP/out" "0:D2H"
expect_rc "single stream, json" 0 "$FERRY" run --bytes 32M --single-stream --json
json_check "single stream: json kind all" "$TMP/out" "len(j['streams']) == 1 and j['streams'][0]['kind'] == 'all'"

# Short link samples: this run's share is counted when chunks retire, a little after their
# copies; it is never more than the link's total.
for ms in 1 2 3; do
  expect_rc "link samples every $ms ms" 0 "$FERRY" run --bytes 256M --chunk-bytes 1M --link-sample-ms $ms --json
  json_check "link samples every $ms ms: own <= total" "$TMP/out" \
    "j['link_samples'] > 0 and j['link_own_gbps_h2d'] <= j['link_gbps_h2d'] and j['link_own_gbps_d2h'] <= j['link_gbps_d2h']"
done
finish
