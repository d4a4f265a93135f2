"""Pure reward functions (no torch at module import): IF (``instruct``), FC (``fc``), general chat (``general``).

``reward_fn.RewardFunction`` is what the ``make_*_reward`` factories return: a callable with ``close()``.
``rm_service.get_reward_model`` is the process's one reward model (local, served or the ``sim`` stand-in).
"""

from fabrika.rewards.general import SequenceClassifierRM, length_penalized, make_general_reward, rm_identity
from fabrika.rewards.instruct import IFRewardConfig, IFScore, make_if_reward, rm_corrected, score_if, verifier_score
from fabrika.rewards.rm_service import RewardModel, RMEndpoint, RMSpec, get_reward_model
from fabrika.rewards.rubric import RubricRewardConfig, RubricScore, make_rubric_reward

__all__ = ["IFRewardConfig", "IFScore", "RMEndpoint", "RMSpec", "RewardModel", "RubricRewardConfig", "RubricScore",
           "SequenceClassifierRM", "get_reward_model", "length_penalized", "make_general_reward", "make_if_reward",
           "make_rubric_reward", "rm_corrected", "rm_identity", "score_if", "verifier_score"]
