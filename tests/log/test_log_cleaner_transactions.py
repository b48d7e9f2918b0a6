"""The log cleaner and transactions (KIP-98): aborted records go and never hide a committed value,
nothing at or past the last stable offset is cleaned, committed transactional records compact like
any others, and a transaction marker stays while its transaction has a batch in the log, then
goes delete.retention.ms after a clean found none. Each test runs with the transactions taken from a
producer state kept in step with the log (the broker's way) and read from the log (no callback)."""
import pytest
from cleaner_helpers import Setup, batches, compact_config, latest_per_key

from odradek.broker.producer_state import ProducerStateManager
from odradek.log.log_cleaner import LogCleaner
from odradek.protocol.records import (
    TRANSACTIONAL_FLAG,
    ControlMarker,
    build_batch,
    build_control_batch,
    control_marker,
    decode_records,
    iter_batches,
)

MODES = ["state", "log"]
TXN, OTHER = 5, 9  # transactional producer ids
EPOCH = 0


def data_records(log) -> list[tuple[int, str, str | None]]:
    """(offset, key, value) of every data record (control batches left out), in order."""
    out = []
    for view in log.segment_views(open_files=False):
        seg = view.segment
        for header in seg.scan(0):
            if header.is_control:
                continue
            for offset, _, key, value, _ in decode_records(seg._pread(header.size, header.position)):
                out.append((offset, key.decode(), None if value is None else value.decode()))
    return out


def markers(log) -> list[tuple[int, int, int]]:
    """(offset, producer id, batch size) of every control batch."""
    return [(h.base_offset, h.producer_id, h.size) for h in batches(log) if h.is_control]


def fill(s: Setup, rounds: int, keys: int = 3, prefix: str = "x") -> None:
    """Plain records for keys <prefix>0.. so that segments roll."""
    for r in range(rounds):
        for i in range(keys):
            s.put(f"{prefix}{i}", f"{r}-{i}")


def rebuilt(log) -> ProducerStateManager:
    """Producer state rebuilt from the log, as a restart or a new leader would have it."""
    state = ProducerStateManager()
    state.rebuild(((h, control_marker(log.read(h.base_offset, 0), h) if h.is_control else None)
                   for h in log.iter_batch_headers()), high_watermark=log.log_end_offset)
    return state


@pytest.mark.parametrize("mode", MODES)
def test_an_aborted_value_never_survives_nor_shadows_the_committed_one(tmp_path, clock, mode):
    # __consumer_offsets' case: a group's committed offset, then a transactional offset commit
    # that aborted. Kafka's cleaner does not map the aborted record, so the committed one stays.
    s = Setup(tmp_path, clock, compact_config(), transactions=mode)
    committed = s.put("group-a", "committed-1")
    s.put("group-b", "committed-b")
    txn_first = s.put("group-a", "aborted-a", txn=True, producer_id=TXN, producer_epoch=EPOCH,
                      base_sequence=0)
    s.put("only-aborted", "aborted-x", txn=True, producer_id=TXN, producer_epoch=EPOCH,
          base_sequence=1)
    s.put("group-b", "aborted-b", txn=True, producer_id=TXN, producer_epoch=EPOCH, base_sequence=2)
    abort = s.end_txn(TXN, EPOCH, commit=False)
    fill(s, rounds=8)
    active = s.log.segment_base_offsets()[-1]
    assert abort < active
    markers_before = markers(s.log)
    assert s.cleaner.clean_once()
    after = data_records(s.log)
    assert all(not value.startswith("aborted") for _, _, value in after if value)
    assert (committed, "group-a", "committed-1") in after
    latest = latest_per_key(after)
    assert latest["group-a"] == (committed, "committed-1")
    assert latest["group-b"][1] == "committed-b"
    assert "only-aborted" not in latest
    assert markers(s.log) == markers_before
    # the producer's last batch stays, empty, so its epoch and sequence survive (as before)
    kept = [h for h in batches(s.log) if h.producer_id == TXN and not h.is_control]
    assert [(h.last_offset, h.record_count, h.base_sequence) for h in kept] == [(abort - 1, 0, 2)]
    # and a rebuild of the cleaned log finds the transaction aborted, none open
    state = rebuilt(s.log)
    assert state.ongoing_transactions() == {}
    assert [(t.producer_id, t.last_offset) for t in state.aborted_transactions(0, abort + 1)] == [(TXN, abort)]
    assert state.entry(TXN).batches[-1].last_seq == 2
    assert txn_first < abort
    # cleaned again (new dirty data): still the committed value
    fill(s, rounds=8)
    assert s.cleaner.clean_once()
    assert latest_per_key(data_records(s.log))["group-a"] == (committed, "committed-1")


@pytest.mark.parametrize("mode", MODES)
def test_nothing_at_or_past_the_last_stable_offset_is_cleaned_while_a_transaction_is_open(
        tmp_path, clock, mode):
    s = Setup(tmp_path, clock, compact_config(), transactions=mode)
    fill(s, rounds=6)
    txn_first = s.put("x0", "in-txn", txn=True, producer_id=TXN, producer_epoch=EPOCH, base_sequence=0)
    fill(s, rounds=10)  # other producers go on writing the same keys
    stable_segment = max(b for b in s.log.segment_base_offsets() if b <= txn_first)
    assert stable_segment < s.log.segment_base_offsets()[-2]  # segments past it are cleanable by HW
    before = data_records(s.log)
    assert s.cleaner.clean_once()
    after = data_records(s.log)
    assert [r for r in after if r[0] >= stable_segment] == [r for r in before if r[0] >= stable_segment]
    assert len([r for r in after if r[0] < stable_segment]) < len([r for r in before if r[0] < stable_segment])
    assert not s.cleaner.clean_once()  # nothing more to do while the transaction is open
    assert data_records(s.log) == after

    # committed, but the marker is not yet below the high watermark: the LSO stays
    commit = s.end_txn(TXN, EPOCH, commit=True)
    fill(s, rounds=4)
    s.high_watermark = commit
    before = data_records(s.log)
    assert not s.cleaner.clean_once()
    assert data_records(s.log) == before

    # replicated: the transaction's records are cleaned like any others
    s.high_watermark = None
    assert s.cleaner.clean_once()
    cleaned = data_records(s.log)
    assert all(value != "in-txn" for _, _, value in cleaned)  # x0 was written again since
    active = s.log.segment_base_offsets()[-1]
    assert len({key for o, key, _ in cleaned if o < active}) == len([o for o, _, _ in cleaned if o < active])
    assert commit in {o for o, _, _ in markers(s.log)}


@pytest.mark.parametrize("mode", MODES)
def test_committed_transactional_values_compact_like_any_others(tmp_path, clock, mode):
    s = Setup(tmp_path, clock, compact_config(), transactions=mode)
    s.put("k2", "aborted-2", txn=True, producer_id=TXN, producer_epoch=EPOCH, base_sequence=0)
    s.end_txn(TXN, EPOCH, commit=False)  # the same producer's transaction before: aborted
    s.put("k1", "before-txn")
    s.put("k0", "txn-0", txn=True, producer_id=TXN, producer_epoch=EPOCH, base_sequence=1)
    txn_k1 = s.put("k1", "txn-1", txn=True, producer_id=TXN, producer_epoch=EPOCH, base_sequence=2)
    s.end_txn(TXN, EPOCH, commit=True)
    s.put("k0", "after-txn")
    fill(s, rounds=8)
    assert s.cleaner.clean_once()
    latest = latest_per_key(data_records(s.log))
    values = {value for _, _, value in data_records(s.log)}
    assert latest["k1"] == (txn_k1, "txn-1")  # the committed value is the key's latest
    assert "before-txn" not in values  # and it superseded the older one
    assert "txn-0" not in values  # a committed value superseded later goes
    assert latest["k0"][1] == "after-txn"
    assert "k2" not in latest


@pytest.mark.parametrize("mode", MODES)
def test_a_marker_stays_while_its_transaction_has_a_batch_and_goes_after_delete_retention(tmp_path, clock, mode):
    """Four transactions on key k, alternating two producers: 0 committed, 1 aborted, 2
    committed (k's latest committed value), 3 aborted (its producer's last batch: kept empty).
    The markers of 0 and 1, whose records are all gone, get a delete horizon and go after
    delete.retention.ms; those of 2 and 3 stay; a rebuild of the producer state finds no
    transaction open at any point."""
    clock.now = 1_000_000
    s = Setup(tmp_path, clock, compact_config(delete_retention_ms=60_000), transactions=mode)
    for n, commit in enumerate([True, False, True, False]):
        pid = TXN if n % 2 == 0 else OTHER
        s.put("k", f"txn-{n}", txn=True, producer_id=pid, producer_epoch=EPOCH, base_sequence=n // 2)
        s.end_txn(pid, EPOCH, commit=commit)
        fill(s, rounds=3)
    fill(s, rounds=6)
    before = markers(s.log)
    assert len(before) == 4
    assert s.cleaner.clean_once()
    assert [o for o, _, _ in markers(s.log)] == [o for o, _, _ in before]
    horizons = {h.base_offset: h.delete_horizon_ms for h in batches(s.log) if h.is_control}
    assert [horizons[o] for o, _, _ in before] == [clock.now + 60_000, clock.now + 60_000, None, None]
    assert latest_per_key(data_records(s.log))["k"][1] == "txn-2"

    clock.now += 59_000
    fill(s, rounds=6)
    assert s.cleaner.clean_once()
    assert len(markers(s.log)) == 4   # not before the horizon
    clock.now += 2_000
    fill(s, rounds=6)
    assert s.cleaner.clean_once()
    assert [o for o, _, _ in markers(s.log)] == [o for o, _, _ in before[2:]]
    assert latest_per_key(data_records(s.log))["k"][1] == "txn-2"
    state = rebuilt(s.log)
    assert state.ongoing_transactions() == {}
    assert state.last_stable_offset(s.log.log_end_offset) == s.log.log_end_offset


def test_a_transaction_state_that_changes_before_the_swap_aborts_the_clean(tmp_path, clock):
    # The first read of the producer state may catch it half rebuilt (after a truncation) or
    # half updated; the cleaner reads it again under the log's lock before each swap.
    s = Setup(tmp_path, clock, compact_config(), transactions="state")
    committed = s.put("group-a", "committed-1")
    s.put("group-a", "aborted-a", txn=True, producer_id=TXN, producer_epoch=EPOCH, base_sequence=0)
    s.end_txn(TXN, EPOCH, commit=False)
    fill(s, rounds=8)
    before = data_records(s.log)
    calls = []

    def half_rebuilt(tp):
        calls.append(tp)
        stable, aborted = s.transaction_state(tp)
        return (stable, []) if len(calls) <= 2 else (stable, aborted)  # grab, then the clean's read

    s.cleaner = LogCleaner(s.manager, s._hw, now_ms=clock, transaction_state=half_rebuilt)
    assert not s.cleaner.clean_once()
    assert data_records(s.log) == before
    assert s.cleaner.clean_once()
    assert latest_per_key(data_records(s.log))["group-a"] == (committed, "committed-1")


def test_transaction_snapshot_matches_the_producer_state_and_changes_nothing():
    state = ProducerStateManager()

    def append(data: bytes, offset: int, marker=None) -> None:
        header = next(iter_batches(data))
        state.update(header, offset, offset + header.last_offset_delta, marker)

    txn = build_batch([(b"k", b"v")], producer_id=TXN, producer_epoch=0, base_sequence=0,
                      attributes=TRANSACTIONAL_FLAG)
    assert state.transaction_snapshot(10) == (10, [])
    append(txn, 3)
    assert state.transaction_snapshot(10) == (3, [])
    append(build_control_batch(TXN, 0, False, 0), 7, ControlMarker(False, 0))
    lso, aborted = state.transaction_snapshot(7)  # the marker is not below the HW yet
    assert lso == 3 == state.last_stable_offset(7)
    assert [(t.producer_id, t.first_offset, t.last_offset) for t in aborted] == [(TXN, 3, 7)]
    assert state.transaction_snapshot(8)[0] == 8
    assert state.transaction_snapshot(7)[0] == 3  # nothing was forgotten by the look at 8
    state.truncate_head(5)
    assert state.transaction_snapshot(7)[0] == 5  # never below the log start
