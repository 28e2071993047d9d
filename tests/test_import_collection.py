"""vLLM is imported with Python's cyclic collector paused and what exists then frozen out of its
reach, once per process (`vllm_engine.imported_out_of_collection`). Pure logic: each case runs a
fresh interpreter importing a small module of its own in vLLM's place."""

import subprocess
import sys
import textwrap


def run_fresh(tmp_path, body: str) -> None:
    (tmp_path / "probe_module.py").write_text("TABLE = [{'row': i} for i in range(20000)]\n")
    script = textwrap.dedent(
        """
        import gc, sys, weakref
        sys.path.insert(0, {path!r})
        from hsedit.engine.vllm_engine import imported_out_of_collection

        class Node:
            pass

        def cyclic_garbage():
            node = Node()
            node.self = node
            dead = []
            watcher = weakref.ref(node, lambda _: dead.append(True))
            del node
            return dead, watcher
        """
    ).format(path=str(tmp_path)) + textwrap.dedent(body)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_first_import_runs_without_the_collector_and_leaves_its_objects_frozen(tmp_path):
    run_fresh(tmp_path, """
        assert gc.isenabled() and gc.get_freeze_count() == 0
        with imported_out_of_collection("probe_module"):
            assert not gc.isenabled()
            import probe_module
        assert gc.isenabled()
        assert gc.get_freeze_count() > 20000  # the module's rows among them
        dead, _ = cyclic_garbage()  # made afterwards: collected as ever
        gc.collect()
        assert dead == [True]
    """)


def test_a_later_start_freezes_nothing_so_earlier_garbage_is_still_freed(tmp_path):
    run_fresh(tmp_path, """
        with imported_out_of_collection("probe_module"):
            import probe_module
        frozen = gc.get_freeze_count()
        dead, _ = cyclic_garbage()  # a closed engine's cycles, say, not yet collected
        with imported_out_of_collection("probe_module"):
            assert gc.isenabled()
        assert gc.get_freeze_count() == frozen
        gc.collect()
        assert dead == [True]
    """)


def test_a_collector_the_caller_disabled_stays_disabled(tmp_path):
    run_fresh(tmp_path, """
        gc.disable()
        with imported_out_of_collection("probe_module"):
            import probe_module
        assert not gc.isenabled() and gc.get_freeze_count() > 0
    """)
