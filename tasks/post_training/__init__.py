"""The post_training stage: a language model trained further from a checkpoint: continued training (all weights or
LoRA adapters), supervised fine-tuning on prompt/response records, DPO on preference triplets; and the merge of
adapters into plain weights (``corpusforge lm merge``)."""

from corpusforge.tasks.post_training.config import PostTrainingConfig
from corpusforge.tasks.stage import Registers, Stage, StepOutputs

STAGE = Stage(
    section="post_training", config=PostTrainingConfig, after="corpus", live=True,
    doc="Train a language model further from a checkpoint: full, LoRA, SFT or DPO.",
    task="corpusforge.tasks.post_training.build:post_training_task",
    core="corpusforge.tasks.post_training.build:build_post_training",
    steps={
        "post_training": StepOutputs(mlflow=("config.json", "metrics.json", "loss_curve.png", "answers.json"),
                                     plots=(("loss_curve.png", "Loss curves"),),
                                     loader="corpusforge.tasks.post_training.inference:load_artifact"),
        "lora_merge": StepOutputs(mlflow=("config.json",),
                                  loader="corpusforge.tasks.post_training.inference:load_artifact"),
    },
    registers=Registers(step="post_training", wants="corpusforge.tasks.post_training.register:generates",
                        register="corpusforge.tasks.post_training.register:register_post_trained",
                        what="a text-generating pyfunc (plain weights; any LoRA adapters merged in)"),
    needs_split=("valid",),
    needs_split_hint="give lm finetune --valid FILE, or set corpus.split.valid=0.1",
)
