"""SIMO phase detection: condense a run's collectives ("ticks") into a few phases.

Method of Albert et al., "Modeling Parallel AI Applications for Performance Analysis on
Cloud Environments" (section 3): each rank's work before a collective is reduced to its
order of magnitude; the SIMO of a tick (Sum of Instructions in Magnitude Order) is the sum
of those magnitudes over ranks; ticks whose SIMO lies within +/- tolerance of a phase's
representative (the SIMO of the tick that opened the phase) belong to that phase.

Pipeline::

    ids = assign(simo(work), tolerance=1, key=phase_key(op, nbytes))
    table = phase_table(ids, comm_s, compute_s, op=op, simo=s, op_names=names)
    print(format_table2(table))

``OnlinePhases`` gives the same ids and table batch by batch with memory that does not grow
with the number of ticks. See docs/phases.md for the rules and the paper's slips.
"""

from .detect import SIZE_KEY_FACTOR, assign, magnitude, pas2p_assign, phase_key, simo
from .online import OnlinePhases
from .table import (
    TABLE2_HEAD,
    TABLE3_HEADER,
    Phase,
    PhaseTable,
    format_table2,
    format_table3_row,
    phase_table,
    table2_rows,
    table3_cells,
)

__all__ = [
    "OnlinePhases",
    "Phase",
    "PhaseTable",
    "SIZE_KEY_FACTOR",
    "TABLE2_HEAD",
    "TABLE3_HEADER",
    "assign",
    "format_table2",
    "format_table3_row",
    "magnitude",
    "pas2p_assign",
    "phase_key",
    "phase_table",
    "simo",
    "table2_rows",
    "table3_cells",
]
