from pipeline.bench.threshold_search import CapacityExceeded, classify_failure, find_threshold


def test_first_failing_size_is_the_threshold_and_search_stops():
    ran = []

    def run_one(size):
        ran.append(size)
        if size >= 8:
            raise CapacityExceeded("kv_capacity", f"{size} sequences do not fit", {"x": 1})
        return {"output_tok_s": float(size)}

    result = find_threshold([16, 1, 2, 4, 8, 32], run_one)
    assert ran == [1, 2, 4, 8]
    assert result.max_ok_size == 4
    assert result.threshold.size == 8 and result.threshold.failure == "kv_capacity"
    assert result.to_dict()["threshold_detail"] == "8 sequences do not fit"
    assert result.threshold.metrics == {"x": 1}


def test_any_exception_is_caught_classified_and_recovered_from():
    recovered = []

    class OutOfMemoryError(RuntimeError):
        pass

    def run_one(size):
        if size == 4:
            raise OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return {}

    result = find_threshold([1, 2, 4, 8], run_one, after_failure=lambda: recovered.append(1))
    assert result.threshold.size == 4 and result.threshold.failure == "oom"
    assert recovered == [1]


def test_no_failure_means_no_threshold():
    result = find_threshold([1, 2], lambda s: {"s": s})
    assert result.threshold is None and result.max_ok_size == 2
    assert result.to_dict()["threshold_size"] is None


def test_classify_failure():
    assert (
        classify_failure(ValueError("request needs 9 KV blocks, the cache has 4")) == "kv_capacity"
    )
    assert classify_failure(RuntimeError("boom")) == "error"
