"""CUDA-event timing shared by the PyTorch baselines (bench/*_torch.py): the median of `reps`
timings after `warmup` untimed runs. Imported by scripts run as `python3 bench/<name>.py`
(their folder is on sys.path). Any torch 2.x with torch.cuda.Event."""


def median_ms(fn, warmup, reps):
    import torch  # the callers import torch first and skip cleanly when it is missing

    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return times[len(times) // 2]
