"""Material for assignment A5 (training fast): recorded profiler tables and an activation-memory meter.

No solutions live here: the tables are inputs that the assignment reads, and
:func:`saved_activation_bytes` (from :mod:`dlcourse.measure`) is the measuring instrument that the memory budget is checked against.
"""

from __future__ import annotations

from dlcourse.measure import saved_activation_bytes

__all__ = ["PROFILE_TABLES", "profile_table", "saved_activation_bytes"]

# ``torch.profiler`` key-averages tables, recorded once on a 2-core CPU (one torch thread) with torch 2.13 and kept
# as text, so that every run of the assignment reads the same numbers:
#   running_example     ten SGD steps of the two-layer net (N, D_in, H, D_out = 64, 1000, 100, 10), sorted by CPU total
#   autocast_bfloat16   five steps of the same net under CPU bfloat16 autocast, sorted by self CPU time
#   checkpointed_blocks three backward passes through four checkpointed Linear+ReLU blocks (2048 x 512), by CPU total
PROFILE_TABLES = {
    "running_example": """\
-------------------------------------------------------  ------------  ------------  ------------  ------------  ------------  ------------
                                                   Name    Self CPU %      Self CPU   CPU total %     CPU total  CPU time avg    # of Calls
-------------------------------------------------------  ------------  ------------  ------------  ------------  ------------  ------------
    autograd::engine::evaluate_function: AddmmBackward0         1.21%      92.845us        40.90%       3.139ms     156.960us            20
                                         AddmmBackward0         1.03%      78.674us        37.64%       2.888ms     144.419us            20
                                               aten::mm        35.15%       2.698ms        35.24%       2.704ms      90.142us            30
                                           aten::linear         0.53%      40.641us        29.55%       2.268ms     113.405us            20
                                            aten::addmm        26.36%       2.023ms        27.55%       2.114ms     105.714us            20
                                Optimizer.step#SGD.step        11.00%     844.154us        14.04%       1.077ms     107.748us            10
                                         aten::mse_loss         1.37%     105.256us         4.60%     353.366us      35.337us            10
                                                aten::t         1.84%     141.200us         3.26%     249.999us       2.778us            90
                                             aten::add_         3.04%     233.322us         3.04%     233.322us       5.833us            40
                                             aten::mean         0.41%      31.614us         2.94%     225.346us      22.535us            10
                      Optimizer.zero_grad#SGD.zero_grad         2.45%     188.350us         2.45%     188.350us      18.835us            10
                                              aten::sum         1.83%     140.803us         2.34%     179.599us       5.987us            30
-------------------------------------------------------  ------------  ------------  ------------  ------------  ------------  ------------
Self CPU time total: 7.675ms
""",
    "autocast_bfloat16": """\
-------------------------------------------------------  ------------  ------------  ------------  ------------  ------------  ------------
                                                   Name    Self CPU %      Self CPU   CPU total %     CPU total  CPU time avg    # of Calls
-------------------------------------------------------  ------------  ------------  ------------  ------------  ------------  ------------
                                            aten::addmm        45.80%      11.223ms        46.02%      11.277ms       1.128ms            10
                                               aten::mm        27.92%       6.841ms        27.94%       6.846ms     456.379us            15
                                            aten::copy_        12.07%       2.956ms        12.07%       2.956ms      42.233us            70
                                           aten::linear         3.47%     849.356us       102.23%      25.049ms       1.252ms            20
                                Optimizer.step#SGD.step         1.58%     388.266us         2.21%     540.866us     108.173us             5
                                         aten::mse_loss         1.38%     339.145us         2.93%     716.697us      71.670us            10
                                    aten::empty_strided         1.00%     245.558us         1.00%     245.558us       3.778us            65
                      Optimizer.zero_grad#SGD.zero_grad         0.75%     184.055us         0.75%     184.055us      36.811us             5
                                         aten::_to_copy         0.70%     172.729us        13.63%       3.339ms      55.643us            60
                                             aten::add_         0.62%     152.600us         0.62%     152.600us       7.630us            20
-------------------------------------------------------  ------------  ------------  ------------  ------------  ------------  ------------
Self CPU time total: 24.502ms
""",
    "checkpointed_blocks": """\
-------------------------------------------------------  ------------  ------------  ------------  ------------  ------------  ------------
                                                   Name    Self CPU %      Self CPU   CPU total %     CPU total  CPU time avg    # of Calls
-------------------------------------------------------  ------------  ------------  ------------  ------------  ------------  ------------
                                           aten::linear         0.08%     582.939us        49.32%     362.616ms      15.109ms            24
                                            aten::addmm        41.37%     304.185ms        49.17%     361.530ms      15.064ms            24
    autograd::engine::evaluate_function: AddmmBackward0         0.25%       1.843ms        35.93%     264.186ms      22.015ms            12
                                         AddmmBackward0         0.12%     874.839us        35.11%     258.141ms      21.512ms            12
                                               aten::mm        34.90%     256.635ms        34.91%     256.653ms      12.222ms            21
     autograd::engine::evaluate_function: ReluBackward0         0.03%     255.241us        25.61%     188.262ms      15.689ms            12
                                          ReluBackward0         0.81%       5.958ms        25.57%     188.007ms      15.667ms            12
                                             aten::relu         0.57%       4.164ms        11.35%      83.432ms       3.476ms            24
                                        aten::clamp_min        10.77%      79.174ms        10.77%      79.174ms       3.299ms            24
                                            aten::copy_         7.77%      57.154ms         7.77%      57.154ms       2.381ms            24
                               aten::threshold_backward         2.23%      16.389ms         2.23%      16.389ms       1.366ms            12
                                              aten::sum         0.61%       4.520ms         0.63%       4.616ms     307.718us            15
autograd::engine::evaluate_function: torch::autograd...         0.01%      55.974us         0.22%       1.624ms      67.655us            24
                        torch::autograd::AccumulateGrad         0.10%     741.440us         0.21%       1.568ms      65.323us            24
-------------------------------------------------------  ------------  ------------  ------------  ------------  ------------  ------------
Self CPU time total: 735.238ms
""",
}


def profile_table(name: str = "running_example") -> str:
    """One of the recorded key-averages tables (see :data:`PROFILE_TABLES`)."""
    return PROFILE_TABLES[name]
