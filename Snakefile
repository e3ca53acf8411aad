# tapmachine: TAP machines (Tramel et al. 2018) and UCD-LMI (Taniguchi et al. 2023) as one workflow.
# Run `snakemake --cores N`; the papers' sizes: `--configfile workflow/config/paper.yaml` (an overlay).
import os

from snakemake.exceptions import WorkflowError
from snakemake.utils import min_version

min_version("9.0")

# Every job inherits one BLAS/OpenMP thread; jobs given more cores pass --threads {threads} and
# raise torch's count themselves, so no job runs more threads than its cores (with 2 threads on
# a core another job held, a TAP epoch took 60 times as long).
os.environ.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")


# `snakemake --report report.html`: every figure with its caption (workflow/report/).
report: "workflow/report/workflow.rst"


# The default config; each --configfile (then --config) overlays it: mappings are merged key by
# key, any other value (a list included) replaced, and a section or named entry set to null is
# removed (common.smk). Relative to the working directory, as every output path.
configfile: "config.yaml"


include: "workflow/rules/common.smk"
include: "workflow/rules/tracking.smk"
include: "workflow/rules/repair.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/likelihood.smk"
include: "workflow/rules/harvest.smk"
include: "workflow/rules/figures.smk"
include: "workflow/rules/ucd_fig1.smk"
include: "workflow/rules/ucd_dbm.smk"
include: "workflow/rules/denoise.smk"
include: "workflow/rules/deep.smk"


# Only a run with jobs to do calls these (not a dry run, --lint, or a run with nothing to do).
# onstart stops a run before its first job where damaged files were found (common.smk) or the
# store's manifest is missing though results exist (tracking.smk), but a run of set_aside_damaged
# alone; it makes the store if needed and opens one MLflow parent run per experiment for this
# invocation; at the end a short summary (what was made and where, failures, how to browse the
# runs). tapmachine.pipeline.tracking.invocation.
onstart:
    if set(workflow.dag_settings.targets) != {"set_aside_damaged"}:
        if DAMAGED:
            raise WorkflowError(
                "tapmachine: damaged files (named above) would be read or kept: "
                "`snakemake --cores 1 set_aside_damaged` first (with the same --configfile)"
            )
        if REMAKE_STORE:
            raise WorkflowError(
                _invocation.remake_store(config["tracking"]["store"], TRACKING_FILE)
            )
    _invocation.invocation_start(config["tracking"]["store"], TRACKING_FILE, RUN_NAME)


onsuccess:
    _invocation.invocation_end(True, config["tracking"]["store"], TRACKING_FILE, RESULTS)


onerror:
    _invocation.invocation_end(False, config["tracking"]["store"], TRACKING_FILE, RESULTS)


localrules:
    all,
    tracking_init,
    set_aside_damaged,
    fetch_dataset,
    data,
    train,
    fig12,
    likelihood_table,
    harvest,
    figures,
    ucd_fig1,
    ucd_train,
    ucd_samples,
    ucd_completion,
    ucd_table1,
    ucd_table2,
    fig8,
    fig9,
    fig_denoise_real,
    denoise,
    fig10,
    fig11,


rule all:
    default_target: True
    input:
        rules.data.input,
        rules.train.input,
        rules.fig12.input,
        rules.likelihood_table.input,
        rules.harvest.input,
        rules.figures.input,
        rules.ucd_fig1.input,
        rules.ucd_train.input,
        rules.ucd_samples.input,
        rules.ucd_completion.input,
        rules.ucd_table1.input,
        rules.ucd_table2.input,
        rules.denoise.input,
        rules.fig10.input,
        rules.fig11.input,
