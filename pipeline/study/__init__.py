"""The batch x parallelism study: for every parallel mapping, kernel mode, workload and batch
size, the time, accuracy, communication and memory of the torch engine, and a report that
compares them with Shin et al. (2024) and recommends a mapping and batch size.

    grid        mappings x kernels x workloads -> series; the batch sizes a series runs next
    probes      held-out text -> cloze items, perplexity windows, greedy prompts
    accuracy    a loaded engine's accuracy at one batch size; the flag against batch 1
    comm_bytes  payload bytes of rank 0's collectives (hardware-independent TP vs PP)
    nvlink      NVML NVLink TX/RX counters, where the driver has them
    cell        one cell measured on a loaded engine; series: a series' engine and cells
    runner      every series, in processes of their own, resumable
    summary, report, findings, plots, recommend: what the report says
"""
