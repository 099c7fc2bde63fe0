"""Every ported case, in table order."""

from cases_aten import CASES as ATEN
from cases_builtin_bugs import CASES as BUILTIN_BUGS
from cases_group_batch import CASES as GROUP_BATCH
from cases_split_cat import CASES as SPLIT_CAT

ALL_CASES = [*SPLIT_CAT, *GROUP_BATCH, *ATEN, *BUILTIN_BUGS]
