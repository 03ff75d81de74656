# The CPU pair cross-validated with the drift probe timing the engines alone and serving, alternating (issue #28,
# deliverable 4): two rounds of one crossval each, same grid, out of sample, --drift scale. Results:
# calibration/crossval/cpu-2core/drift-probe-ab/ (its README). Run from the repository root with .venv/bin on PATH.
cd "${SNAPSHOT:-.}"
for k in 1 2; do for p in alone serving; do
  tokenrouter crossval --profiles calibration/crossval/cpu-2core --routers markov --concurrency 6 --thresholds '1,1;2,1;1,2;3,1;2,2;4,1' --max-tokens 64 --warmup-s 2 --measure-s 7 --repeats 2 --sim-s 200 --drift scale --drift-probe $p --out "${OUT:-/tmp/drift-probe-ab}/$p-$k"
done; done
