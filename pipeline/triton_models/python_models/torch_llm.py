"""tensorrt_llm for backend=torch: the torch engine behind the tensorrtllm backend's interface.

execute() submits each request to the engine and returns at once; the service's one responder
thread sends every request's responses as the engine produces tokens (decoupled), or its one
whole answer (deploy.decoupled_mode=false). Several prompts in one request are engine requests of
their own, answered with their batch_index, as the tensorrtllm backend answers them. A response
carries the outputs its request asked for: output_ids and sequence_length as the tensorrtllm
backend's, and text_output (ours), detokenized in the responder thread. It also takes the
ensemble's text inputs (text_input, stop_words, bad_words; ours) and tokenizes them itself.

Instances: with engine_process, the instances (each a stub process, with a GIL of its own) share
one engine process, so tokenizing, detokenizing and sending responses run in parallel; each
instance keeps its share of max_response_rate.

Engine counters are exported as Triton custom metrics (pipeline_engine_*), since Triton's own
counters can't see in-flight batching: generated_tokens > steps proves that steps served several
requests at once. The instance that started the engine exports them; every instance exports its
own hops (label `instance`).
"""

import json
import os
import sys
import threading
import time
from collections.abc import Iterable

import numpy as np
import triton_python_backend_utils as pb_utils
from llm_responses import Caller, Part, split, tensors  # copied beside this file by deploy

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
METRICS = {  # engine stats key -> (metric family, description)
    "max_running": (
        "pipeline_engine_batch_size",
        "most sequences the engine ran in one batch since start (polled)",
    ),
    "num_running": ("pipeline_engine_running_requests", "sequences in the running batch now"),
    "num_waiting": ("pipeline_engine_waiting_requests", "requests queued in the engine now"),
    "num_steps": ("pipeline_engine_steps", "engine steps since start"),
    "num_prompt_steps": (
        "pipeline_engine_prompt_steps",
        "engine steps that carried prompt tokens since start (the rest only decoded)",
    ),
    "num_generated_tokens": (
        "pipeline_engine_generated_tokens",
        "tokens generated since start (> steps only when batched)",
    ),
    "num_preemptions": ("pipeline_engine_preemptions", "sequences preempted since start"),
    "num_free_blocks": ("pipeline_engine_free_kv_blocks", "free paged-KV blocks now"),
    "num_total_blocks": ("pipeline_engine_kv_blocks", "paged-KV blocks in the engine's cache"),
    "num_cached_blocks": (
        "pipeline_engine_cached_kv_blocks",
        "paged-KV blocks the prefix cache names now (held or free until evicted)",
    ),
    "num_prefix_queried_tokens": (
        "pipeline_engine_prefix_cache_queried_tokens",
        "prompt tokens admitted since start (hit rate: hit_tokens / this)",
    ),
    "num_prefix_hit_tokens": (
        "pipeline_engine_prefix_cache_hit_tokens",
        "prompt tokens since start whose K/V came from the prefix cache",
    ),
    "num_host_cached_blocks": (
        "pipeline_engine_host_kv_blocks_cached",
        "prefix-cache blocks in the host tier now",
    ),
    "num_host_hit_blocks": (
        "pipeline_engine_host_kv_hit_blocks",
        "prefix-cache blocks copied back from the host tier since start",
    ),
    "spec_num_drafted_tokens": (
        "pipeline_engine_spec_draft_tokens",
        "draft tokens verified since start (speculative decoding)",
    ),
    "spec_num_accepted_tokens": (
        "pipeline_engine_spec_accepted_tokens",
        "draft tokens the target accepted since start (speculative decoding)",
    ),
    "spec_acceptance_rate": (
        "pipeline_engine_spec_acceptance_rate",
        "accepted / verified draft tokens since start (speculative decoding)",
    ),
    "spec_mean_accepted_tokens": (
        "pipeline_engine_spec_mean_accepted_tokens",
        "drafts accepted per request and verify step since start (its tokens: one more)",
    ),
}
HEALTH_METRICS = {  # per instance: each has its own handle on the engine
    "is_ready": (
        "pipeline_engine_ready",
        "1 while the engine serves; 0 while a failed engine is started again, or once it is "
        "not (it failed too often: restart the server)",
    ),
    "num_restarts": ("pipeline_engine_restarts", "times a failed engine was started again"),
}
METRICS_PERIOD_S = 0.05
# recomputing the hops' percentiles holds the stub's GIL, which the requests' own work waits
# behind: at most once a second, not every METRICS_PERIOD_S (docs/design.md, the response path)
HOPS_PERIOD_S = 1.0


def hop_metrics(hops: dict[str, str], stats: Iterable[str]) -> dict[str, tuple[str, str]]:
    """LLMService.hops key -> (metric family, description), from its HOPS and HOP_STATS."""
    return {
        f"{hop}_ms_{q}": (f"pipeline_{hop}_ms_{q}", f"{q} over the last streams: ms, {text}")
        for hop, text in hops.items()
        for q in stats
    }


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in config["parameters"].items()}
        self.input_names = frozenset(tensor["name"] for tensor in config["input"])
        self.max_batch_size = int(config["max_batch_size"])
        self.is_decoupled = pb_utils.using_decoupled_model_transaction_policy(config)
        num_instances = sum(int(group["count"]) for group in config["instance_group"])
        # one engine per server and model: the stubs' parent is the tritonserver process
        share_key = f"{os.getppid()}/{args['model_name']}/{args['model_version']}"
        if params["python_path"] not in sys.path:
            sys.path.insert(0, params["python_path"])
        from pipeline.triton_models.drain import REFUSAL, DrainWatch
        from pipeline.triton_models.engine_runtime import runtime_from_parameters
        from pipeline.triton_models.hop_log import HOP_STATS, HOPS
        from pipeline.triton_models.llm_service import LLMService
        from pipeline.triton_models.lora_parameters import lora_runtime

        self.service = LLMService(
            params["engine_dir"],
            device=params["device"],
            runtime=runtime_from_parameters(params)
            | lora_runtime(params, args["model_repository"]),
            exclude_input_in_output=params["exclude_input_in_output"] == "true",
            coalesce_stream=params["coalesce_stream"] == "true",
            max_response_rate=float(params["max_response_rate"]) / num_instances,
            engine_process=params["engine_process"] == "true",
            respond=self._respond,
            tokenizer_dir=params.get("tokenizer_dir") or None,
            skip_special_tokens=params.get("skip_special_tokens", "true") == "true",
            response_lanes=int(params["response_lanes"]),
            add_special_tokens=params["add_special_tokens"] == "true",
            share_engine=share_key if num_instances > 1 else None,
            max_restarts=int(params["max_engine_restarts"]),
            restart_window_s=float(params["restart_window_s"]),
            num_threads=int(params["num_threads"]),
        )
        from pipeline.engine.core.heap import freeze_loaded

        freeze_loaded()  # its threads (responder, lanes, engine reader) stall in full collections
        labels = {"model": args["model_name"], "version": args["model_version"]}
        self.instance = args["model_instance_name"]
        hop_labels = labels | {"instance": self.instance}
        exported = [
            *((key, metric, labels) for key, metric in METRICS.items() if self.service.owns_engine),
            *((key, metric, hop_labels) for key, metric in hop_metrics(HOPS, HOP_STATS).items()),
            *((key, metric, hop_labels) for key, metric in HEALTH_METRICS.items()),
        ]
        # a Metric needs its MetricFamily alive: keep both
        self.families = {
            key: pb_utils.MetricFamily(
                name=name, description=text, kind=pb_utils.MetricFamily.GAUGE
            )
            for key, (name, text), _ in exported
        }
        self.gauges = {
            key: self.families[key].Metric(key_labels) for key, _, key_labels in exported
        }
        # request id -> its requests in flight, for `stop` (the tensorrtllm backend's cancel,
        # which the BLS sends: Triton 2.51's python backend cannot cancel a BLS request)
        self.stoppable: dict[str, list[Caller]] = {}
        self.stoppable_lock = threading.Lock()
        self.stopped = threading.Event()
        self.drain = DrainWatch()  # polled with the metrics: the server's drain
        self.refusal = REFUSAL
        self.metrics_thread = threading.Thread(target=self._export_metrics, daemon=True)
        self.metrics_thread.start()

    def execute(self, requests):
        received_at = time.perf_counter()  # each request's submit hop starts here
        for request in requests:
            sender = request.get_response_sender()
            # one pass over what was sent: get_input_tensor_by_name rebuilds the input list on
            # every call, ~10 us a name that is absent (most are)
            arrays = {
                tensor.name(): tensor.as_numpy()
                for tensor in request.inputs()
                if tensor.name() in self.input_names
            }
            outputs = frozenset(request.requested_output_names())
            caller = Caller(sender, outputs, request.request_id())
            if bool(arrays.pop("stop", np.zeros(1)).reshape(-1)[0]):
                self._stop_request(caller)
                continue
            if self.is_refusing():
                sender.send(
                    pb_utils.InferenceResponse(error=pb_utils.TritonError(self.refusal)),
                    flags=FINAL,
                )
                continue
            try:
                prompts = split(arrays)
                self._check_policy(arrays, len(prompts))
                caller.expect(len(prompts), self._num_sequences(arrays))
                if caller.request_id:  # known before the engine can answer it
                    with self.stoppable_lock:
                        self.stoppable.setdefault(caller.request_id, []).append(caller)
                for index, prompt in enumerate(prompts):
                    part = Part(caller, index)
                    self.service.generate(prompt, part, "text_output" in outputs, received_at)
            except (ValueError, RuntimeError) as exc:  # bad input, or the engine is gone
                self._refuse(caller, exc)
        return None

    def _stop_request(self, caller: Caller) -> None:
        """`stop`: the requests in flight with its request id end (_stop); its own answer has
        no outputs (decoupled: the final flag alone; else one empty response, the one allowed)."""
        if not caller.request_id:
            caller.sender.send(
                pb_utils.InferenceResponse(
                    error=pb_utils.TritonError(
                        "tensorrt_llm: stop=true needs the request id of the request to stop; "
                        "send it as this request's id"
                    )
                ),
                flags=FINAL,
            )
            return
        self._stop(caller.request_id)
        if self.is_decoupled:
            caller.sender.send(flags=FINAL)
        else:
            caller.sender.send(pb_utils.InferenceResponse(output_tensors=[]), flags=FINAL)

    def _refuse(self, caller: Caller, exc: Exception) -> None:
        """The request's error; a prompt of its batch already submitted answers no more."""
        self._forget(caller)
        if caller.lock is not None:
            with caller.lock:
                if caller.is_closed:
                    return
                caller.is_closed = True
        caller.sender.send(
            pb_utils.InferenceResponse(error=pb_utils.TritonError(f"tensorrt_llm: {exc}")),
            flags=FINAL,
        )

    def _check_policy(self, arrays: dict, num_prompts: int) -> None:
        """Without the decoupled policy a request gets one response: no stream, one prompt."""
        if self.is_decoupled:
            return
        streaming = arrays.get("streaming")
        if streaming is not None and streaming.size and bool(streaming.reshape(-1)[0]):
            raise ValueError(
                "streaming=true sends several responses, which needs the decoupled deployment "
                "(deploy.decoupled_mode=true); send streaming=false"
            )
        if num_prompts > 1:
            raise ValueError(
                f"{num_prompts} prompts in one request are answered in responses of their own "
                f"(batch_index), which needs the decoupled deployment "
                f"(deploy.decoupled_mode=true); send one prompt per request"
            )

    def is_refusing(self) -> bool:
        """The server drains (asked on each request: the metrics thread's poll may lag)."""
        if not self.drain.is_draining:
            self.drain.poll()
        return self.drain.is_draining

    def _num_sequences(self, arrays: dict) -> int:
        """num_return_sequences, each an engine request of its own with its own responses:
        ValueError beyond what this model can run at once, or without the decoupled policy."""
        value = arrays.get("num_return_sequences")
        if value is None or value.size != 1 or not np.issubdtype(value.dtype, np.integer):
            return 1  # the engine request's own checks name what is wrong
        num = int(value.reshape(-1)[0])
        width = arrays.get("beam_width")
        if width is not None and width.size == 1 and int(width.reshape(-1)[0]) > 1:
            return 1  # beam search: the best num beams, in one response
        if num > self.max_batch_size:
            raise ValueError(
                f"num_return_sequences={num} is above this model's max_batch_size="
                f"{self.max_batch_size} (each sequence is a request of its own); send fewer"
            )
        if num > 1 and not self.is_decoupled:
            raise ValueError(
                f"num_return_sequences={num} returns each sequence in responses of its own, "
                f"which needs the decoupled deployment (deploy.decoupled_mode=true)"
            )
        return max(num, 1)

    def _stop(self, request_id: str) -> None:
        """Each request in flight with this id ends now: a stream at its next response, as if
        cancelled; a whole answer with the tokens made so far, as upstream's."""
        with self.stoppable_lock:
            for caller in self.stoppable.get(request_id, ()):
                caller.is_stopped = True
        self.service.stop(lambda part: part.caller.is_stopped)

    def _forget(self, caller: Caller) -> None:
        with self.stoppable_lock:
            callers = self.stoppable.get(caller.request_id, [])
            if caller in callers:
                callers.remove(caller)
            if not callers:
                self.stoppable.pop(caller.request_id, None)

    def _respond(self, part: Part, out) -> bool:
        """One chunk (or the engine's failure) to one request; False once its client is gone."""
        caller = part.caller
        try:
            if caller.lock is None:
                return self._send(part, out)
            with caller.lock:  # its engine requests' lanes take turns
                return not caller.is_closed and self._send(part, out)
        except BaseException:
            caller.is_closed = True  # a send that failed: the caller is gone
            raise
        finally:
            if caller.request_id and caller.is_closed:
                self._forget(caller)

    @staticmethod
    def _send(part: Part, out) -> bool:
        caller = part.caller
        sender = caller.sender
        if isinstance(out, BaseException):  # every open request must hear it, and close
            caller.is_closed = True
            sender.send(
                pb_utils.InferenceResponse(error=pb_utils.TritonError(f"tensorrt_llm: {out}")),
                flags=FINAL,
            )
            return False
        if not out.is_final and caller.is_cancelled():  # the final flag frees the request
            caller.is_closed = True
            sender.send(flags=FINAL)
            return False
        caller.num_open -= out.is_final
        caller.is_closed = caller.num_open == 0  # the last sequence's end ends the request
        sender.send(
            pb_utils.InferenceResponse(output_tensors=tensors(part, out)),
            flags=FINAL if caller.is_closed else 0,
        )
        return True

    def _export_metrics(self):
        max_running, exported = 0, {}
        is_drained = False
        while not self.stopped.wait(METRICS_PERIOD_S):
            if not is_drained and self.drain.poll() is not None:
                self.service.end_all(self.drain.message)
                is_drained = True
            stats = self.service.stats() | self.service.hops(max_age_s=HOPS_PERIOD_S)
            max_running = stats["max_running"] = max(max_running, stats["num_running"])
            for key, gauge in self.gauges.items():
                # the hops once a stream has been answered; a gauge is set when it changes
                if key in stats and exported.get(key) != stats[key]:
                    gauge.set(stats[key])
                    exported[key] = stats[key]

    def finalize(self):
        # the server stops: its requests in flight get the drain time (pipeline.triton_models.drain)
        message = self.drain.wait(lambda: self.service.num_live > 0)
        if message is not None:
            self.service.end_all(message)  # the metrics thread may have: the second finds none
        self.stopped.set()
        self.metrics_thread.join()
        hops = self.service.hops()
        if hops:  # in the server log: where this run's request time went inside the model
            text = ", ".join(f"{key} {value:.1f}" for key, value in hops.items())
            pb_utils.Logger.log_info(f"{self.instance}: hops: {text}")
        if self.service.owns_engine:  # how full and how mixed the steps were (once an engine)
            from pipeline.engine.core.engine_times import ms_per_launch, request_ms

            stats = self.service.stats()
            seqs_per_step = stats["num_scheduled_seqs"] / max(1, stats["num_steps"])
            pb_utils.Logger.log_info(
                f"tensorrt_llm: engine steps {stats['num_steps']}, with prompt tokens "
                f"{stats['num_prompt_steps']}, sequences a step {seqs_per_step:.1f}, "
                f"tokens generated {stats['num_generated_tokens']}"
            )
            times = ", ".join(f"{k} {v:.2f}" for k, v in ms_per_launch(stats).items())
            steps_a_launch = stats["num_steps"] / max(1, stats["num_launches"])
            pb_utils.Logger.log_info(
                f"tensorrt_llm: engine launches {stats['num_launches']}, steps a launch "
                f"{steps_a_launch:.2f} (now {stats['num_scheduler_steps']}, up to "
                f"{stats['max_scheduler_steps']}; scheduled with {stats['num_reserve_steps']} "
                f"left), {times}"
            )
            # against the hops above: the rest of engine_first_token and engine_final is the
            # way in (socket, inbox) and the deltas' way back to the responder
            times = ", ".join(f"{k} {v:.2f}" for k, v in request_ms(stats).items())
            pb_utils.Logger.log_info(f"tensorrt_llm: requests from arrival in the engine: {times}")
        self.service.shutdown()
