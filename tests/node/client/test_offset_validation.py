"""KIP-320's decision on a consumer's position after a leader change (the pure core
node.client.offset_validation; Kafka's SubscriptionState.maybeCompleteValidation)."""
from __future__ import annotations

import pytest

from node.client.offset_validation import (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET,
                                           RaiseTruncation, ResetOffset, SeekValidated,
                                           Validated, complete_validation)


@pytest.mark.parametrize("end_offset", [10, 25])
def test_a_position_at_or_below_the_end_of_its_epoch_is_valid(end_offset):
    assert complete_validation(10, 3, 3, end_offset, True) == Validated()
    assert complete_validation(10, 3, 3, end_offset, False) == Validated()


def test_a_log_truncated_beneath_the_position_moves_it_to_the_divergence():
    assert complete_validation(10, 0, 0, 2, True) == SeekValidated(2, 0)


def test_without_a_reset_policy_the_truncation_is_raised_with_the_divergent_offset():
    assert complete_validation(10, 0, 0, 2, False) == RaiseTruncation(2, 0)


@pytest.mark.parametrize("answer_epoch, end_offset", [(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET),
                                                      (UNDEFINED_EPOCH, 7),
                                                      (4, UNDEFINED_EPOCH_OFFSET)])
def test_an_undefined_answer_resets_or_raises_without_an_offset(answer_epoch, end_offset):
    assert complete_validation(10, 4, answer_epoch, end_offset, True) == ResetOffset()
    assert complete_validation(10, 4, answer_epoch, end_offset, False) == \
        RaiseTruncation(None, UNDEFINED_EPOCH)


def test_an_older_epoch_ending_below_the_position_is_a_truncation_there():
    # The leader never had epoch 5; its epoch 3 ends at 6: the consumer's records from
    # 6 on came from a log the leader does not share.
    assert complete_validation(10, 5, 3, 6, True) == SeekValidated(6, 3)
    assert complete_validation(10, 5, 3, 6, False) == RaiseTruncation(6, 3)


def test_an_older_epoch_reaching_past_the_position_cannot_place_the_divergence():
    # The leader never had the batch (epoch 5) the consumer read last, yet its older
    # epoch 3 runs to 40: the logs part somewhere below 10, where is unknown.
    assert complete_validation(10, 5, 3, 40, True) == ResetOffset()
    assert complete_validation(10, 5, 3, 40, False) == RaiseTruncation(None, UNDEFINED_EPOCH)


def test_a_position_without_a_fetched_epoch_is_never_validated():
    with pytest.raises(AssertionError):
        complete_validation(10, -1, 3, 10, True)
