"""The zoo's models as a new user would make them (bench/zoo.py runs this with the bench-only Python that has
torch + torchvision + onnxruntime; never a Tileplan dependency):

    PY bench/zoo_export.py --out DIR resnet18 vit_b_16 bert_layer
    PY bench/zoo_export.py --out DIR --any mnasnet0_5 inception_v3   # any torchvision classification model
    PY bench/zoo_export.py --out DIR --variant per_channel,dynamo18 resnet18   # other exports (VARIANTS)

Without --any, only the zoo's own models (VISION, TRANSFORMERS); with it, any name torchvision lists among its
classification models (`torchvision.models.list_models(module=torchvision.models)`), exported the same way, e.g.
the held-out models of issue 24, one of the small nets a user writes (USER_NETS: 1-D conv audio nets, a temporal
conv net, a UNet, LSTM / GRU classifiers, an MLP-Mixer, GPT- and DistilBERT-like token models), or a torchvision
segmentation or video model (TORCHVISION_OTHER), or a Hugging Face `transformers` model built from its config
class with seeded random weights (HELDOUT6; needs `transformers` in that Python, not torchvision), or one of the
seventh held-out set's families (HELDOUT7: detection heads, a spatial transformer, PointNet, a Transformer
decoder, a Conformer, a LLaMA-style block, a CRNN, a temporal-shift net, a super-resolution net), or one of the
eighth set's models from outside torchvision (HELDOUT8: timm models at small images, HF Qwen2 / LLaMA decoders with
grouped-query attention; needs timm / transformers in that Python). Inception v3
takes 299 x 299 images (INPUT_SIZE), the video nets 8-frame 112 x 112 clips, the token models 64 int64 token ids
(and an attention mask: random_feeds), HELDOUT6 and HELDOUT7 the inputs they list, every other model 224 x 224
images.

    PY bench/zoo_export.py --out DIR --any --seed 1 hf_bert hf_mobilevit   # PY with torch + transformers

Each model: seeded random weights, BatchNorm statistics from a few random forward passes in training mode
(cumulative averages), `torch.onnx.export` at opset 17, batch 1 (224 x 224 images; 128 tokens of width 768 for
the transformer blocks), nothing simplified or folded by hand; then onnxruntime's `quantize_static` (int8
activations and weights, per-tensor, MinMax on 8 seeded random inputs) in both of its formats. Writes
DIR/<name>.float.onnx, DIR/<name>.qdq.onnx and DIR/<name>.qoperator.onnx (existing files are kept) and prints
one line per model: name, then the three paths, or `name FAILED reason` when the export or the quantizer fails.

`--variant V,...` makes other exports a user plausibly produces instead of the recipe above (VARIANTS: the
exporter, its opset, the input's batch, size and layout, the quantizer's options), each into
DIR/<name>@<variant>.{float,qdq,qoperator}.onnx, printed under the name `<name>@<variant>` (bench/zoo.py
--no-export --models resnet18@per_channel reads them). `dynamic` (onnxruntime's quantize_dynamic:
DynamicQuantizeLinear + ConvInteger / MatMulInteger, no calibration) writes DIR/<name>@dynamic.dynamic.onnx.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any

import numpy as np

VISION = ("resnet18", "resnet50", "mobilenet_v2", "mobilenet_v3_large", "efficientnet_b0", "regnet_x_400mf",
          "squeezenet1_0", "shufflenet_v2_x1_0", "densenet121", "googlenet", "convnext_tiny", "vit_b_16",
          "swin_t")
TRANSFORMERS = ("bert_layer", "gpt2_block")
BN_PASSES = 4
CALIBRATION = 8
SEQ, WIDTH, HEADS, FFN = 128, 768, 12, 3072
# the opset of the models torch cannot export at 17 (its error names the opset that has the op: F.affine_grid 20)
OPSET = {"stn_net": 20, "timm_volo_d1": 18}
INPUT_SIZE = {"inception_v3": 299}  # image side of the models whose layers do not fit a 224 x 224 image
NO_AUX = ("googlenet", "inception_v3")  # auxiliary classifiers only train; seeded init as torchvision trains them
# Small nets a user writes and exports themselves, not from torchvision (--any): name -> input shape. m5_audio: a
# raw-waveform keyword spotter (M5: 1-D convs, BatchNorm, MaxPool1d, global average, Linear); tcn_kws: a temporal
# conv net on 40 MFCCs (dilated 1-D convs, residual adds, a 1x1 shortcut); unet_small: a 4-level UNet (double 3x3
# convs, MaxPool, up by ConvTranspose 2x2 stride 2 on two levels and by bilinear Resize + 1x1 conv on one, skip
# Concats, a 1x1 head).
# dscnn_kws: a depthwise-separable keyword spotter on 40 MFCCs (Conv1d depthwise 3 + pointwise 1, BatchNorm,
# ReLU); lstm_kws / gru_kws: a one-layer LSTM / GRU over 101 MFCC frames, its last state to a Linear; mixer_small:
# an MLP-Mixer (8x8 patches of a 64x64 image, token- and channel-mixing MLPs with GELU, LayerNorm); gpt_tiny: a
# GPT-style decoder (token and position Embeddings, causal masked_fill with -inf, GELU-tanh, pre-norm, an LM head);
# distilbert_tiny: a DistilBERT-like encoder (token and position Embeddings from position ids, an int64 attention
# mask filled with the float minimum, post-norm, GELU, a classifier on the first token).
USER_NETS = {"m5_audio": (1, 1, 8000), "tcn_kws": (1, 40, 101), "unet_small": (1, 3, 128, 128),
             "dscnn_kws": (1, 40, 101), "lstm_kws": (1, 101, 40), "gru_kws": (1, 101, 40),
             "mixer_small": (1, 3, 64, 64), "gpt_tiny": (1, 64), "distilbert_tiny": (1, 64)}
# Held-out set 5 (issue 24): small nets written the way users write them in PyTorch (plain torch.nn, seeded), for
# op and attribute coverage rather than famous architectures (_coverage_net says what each holds). Also USER_NETS.
HELDOUT5 = {"convs_zoo": (1, 3, 65, 49), "gan_decoder": (1, 16), "pool_heads": (1, 3, 48, 48),
            "acts_zoo": (1, 3, 32, 32), "norms_cnn": (1, 3, 32, 32), "mlp_bn": (3, 32),
            "attn_rope": (1, 32, 64), "wide_batch3": (3, 3, 96, 160)}
USER_NETS.update(HELDOUT5)
# Held-out set 7 (issue 24): families the sets before did not hold, in plain torch.nn as users write them (or
# torchvision's detection modules without their postprocessing); _heldout7_net says what each holds.
HELDOUT7 = {"ssdlite_head": (1, 3, 320, 320), "fcos_head": (1, 3, 128, 128), "stn_net": (1, 1, 32, 32),
            "pointnet_cls": (1, 3, 1024), "tfm_decoder": (1, 32, 128), "conformer_block": (1, 64, 80),
            "llama_block": (1, 32), "crnn_ocr": (1, 1, 32, 128), "tsm_ghost": (1, 4, 3, 64, 64),
            "sr_edsr": (1, 3, 48, 48), "convs_zoo2": (1, 3, 40, 56)}
USER_NETS.update(HELDOUT7)
# Held-out set 6 (issue 24): Hugging Face `transformers` architectures as users run them, each built from its
# config class with small sizes and seeded random weights (no download: _hf_net says what each is), exported as
# the model's own forward returns it (a ModelOutput; its tensors named by HF_OUTPUTS). name -> input shape (the
# token models: batch x tokens; the others: their float input).
HELDOUT6 = {"hf_bert": (1, 64), "hf_gpt2": (1, 64), "hf_t5_encoder": (1, 64), "hf_vit": (1, 3, 64, 64),
            "hf_mobilevit": (1, 3, 64, 64), "hf_wav2vec2": (1, 8000), "hf_whisper_encoder": (1, 80, 128),
            "hf_segformer": (1, 3, 64, 64), "hf_convnextv2": (1, 3, 64, 64), "hf_clip_vision": (1, 3, 64, 64)}
HF_OUTPUTS = {"hf_bert": ("last_hidden_state", "pooler_output"), "hf_gpt2": ("logits",),
              "hf_t5_encoder": ("last_hidden_state",), "hf_vit": ("logits",), "hf_mobilevit": ("logits",),
              "hf_wav2vec2": ("last_hidden_state",), "hf_whisper_encoder": ("last_hidden_state",),
              "hf_segformer": ("logits",), "hf_convnextv2": ("logits",),
              "hf_clip_vision": ("last_hidden_state", "pooler_output")}
# Held-out set 8 (issue 24): models from outside torchvision. timm's architectures, built by timm.create_model
# with seeded random weights (no download) at small image sizes (the kwargs given; a ConvMixer built from its
# class, narrowed and made shallow), and Hugging Face `transformers` decoder LMs with grouped-query attention (_heldout8_net says what each
# is; needs timm / transformers in that Python). name -> (timm model or "hf", its kwargs, input shape).
HELDOUT8: dict[str, tuple[str, dict[str, Any], tuple[int, ...]]] = {
    "timm_mobilevit_xs": ("mobilevit_xs", {}, (1, 3, 64, 64)),
    "timm_efficientformer_l1": ("efficientformer_l1", {}, (1, 3, 224, 224)),  # its attention biases fix 224
    "timm_levit_128s": ("levit_128s", {"img_size": 64}, (1, 3, 64, 64)),
    "timm_poolformer_s12": ("poolformer_s12", {}, (1, 3, 64, 64)),
    "timm_repvgg_a0": ("repvgg_a0", {}, (1, 3, 64, 64)),
    "timm_ghostnet_100": ("ghostnet_100", {}, (1, 3, 64, 64)),
    "timm_resmlp_12": ("resmlp_12_224", {"img_size": 64}, (1, 3, 64, 64)),
    "timm_deit_tiny": ("deit_tiny_patch16_224", {"img_size": 64}, (1, 3, 64, 64)),
    "timm_cait_xxs24": ("cait_xxs24_224", {"img_size": 64}, (1, 3, 64, 64)),
    "timm_coat_lite_tiny": ("coat_lite_tiny", {"img_size": 64}, (1, 3, 64, 64)),
    "timm_convmixer": ("timm.models.convmixer.ConvMixer", {"dim": 128, "depth": 4, "kernel_size": 9, "patch_size": 7},
                       (1, 3, 112, 112)),
    "timm_edgenext_xx_small": ("edgenext_xx_small", {}, (1, 3, 64, 64)),
    "timm_fastvit_t8": ("fastvit_t8", {}, (1, 3, 64, 64)),
    "timm_mobileone_s0": ("mobileone_s0", {}, (1, 3, 64, 64)),
    "timm_eva02_tiny": ("eva02_tiny_patch14_224", {"img_size": 56}, (1, 3, 56, 56)),
    "timm_efficientvit_m0": ("efficientvit_m0", {"img_size": 64}, (1, 3, 64, 64)),
    "timm_pvt_v2_b0": ("pvt_v2_b0", {}, (1, 3, 64, 64)),
    "timm_mobilenetv4_conv_small": ("mobilenetv4_conv_small", {}, (1, 3, 64, 64)),
    "hf_qwen2": ("hf", {}, (1, 32)),
    "hf_llama": ("hf", {}, (1, 32)),
}
# Held-out set 9 (issue 24): more models from outside torchvision's classifiers and the sets before, chosen for
# what they compute at run time that the others did not: timm models at small images (weights standardised by
# the graph, split attention, cross-covariance attention, outlook attention's Fold, ReLU linear attention,
# separable self-attention, multi-resolution fusion, relative-position attention, mixed kernel sizes), Hugging
# Face encoders, an encoder-decoder and LMs (shared layers, disentangled attention, position ids by cumsum,
# soft-capped logits, a selective state-space scan, interpolated position embeddings, a grouped-conv transformer)
# and torchvision's RAFT optical flow (_heldout9_net says what each is). name -> (timm model, "hf" or "tv", its
# kwargs, input shape).
HELDOUT9: dict[str, tuple[str, dict[str, Any], tuple[int, ...]]] = {
    "timm_nf_regnet_b0": ("nf_regnet_b0", {}, (1, 3, 64, 64)),
    "timm_resnest14d": ("resnest14d", {}, (1, 3, 64, 64)),
    "timm_xcit_nano": ("xcit_nano_12_p16_224", {"img_size": 64}, (1, 3, 64, 64)),
    "timm_volo_d1": ("volo_d1_224", {"img_size": 64}, (1, 3, 64, 64)),
    "timm_efficientvit_b0": ("efficientvit_b0", {}, (1, 3, 64, 64)),
    "timm_mobilevitv2_050": ("mobilevitv2_050", {}, (1, 3, 64, 64)),
    "timm_hrnet_w18_small": ("hrnet_w18_small", {}, (1, 3, 64, 64)),
    "timm_botnet26t": ("botnet26t_256", {"img_size": 64}, (1, 3, 64, 64)),
    "timm_mixnet_s": ("mixnet_s", {}, (1, 3, 64, 64)),
    "hf_albert": ("hf", {}, (1, 64)),
    "hf_deberta_v2": ("hf", {}, (1, 64)),
    "hf_roberta": ("hf", {}, (1, 64)),
    "hf_bart": ("hf", {}, (1, 32)),
    "hf_gemma2": ("hf", {}, (1, 32)),
    "hf_mamba": ("hf", {}, (1, 16)),
    "hf_squeezebert": ("hf", {}, (1, 64)),
    "hf_dinov2": ("hf", {}, (1, 3, 56, 56)),
    "hf_swin": ("hf", {}, (1, 3, 64, 64)),
    "tv_raft_small": ("tv", {}, (1, 3, 128, 128)),
}
# Held-out set 10 (issue 24): architectures people deploy that sets 5-9 did not hold, chosen for structure the
# others lack: timm CNNs (ReXNet's partial residual on a channel slice, LCNet, DLA's tree aggregation, DPN's dual
# path, Xception's separable convs, Res2Net's hierarchical splits, SKNet's selective kernels, CSPDarkNet's Mish,
# VoVNet's one-shot aggregation with eSE, TResNet's space-to-depth stem and anti-aliased downsampling, StarNet's
# elementwise star products), timm hybrids (Sequencer's bidirectional LSTMs over rows and columns, DaViT's channel
# attention, Visformer, NesT's block aggregation), Hugging Face models (ELECTRA's embedding projection,
# MobileBERT's bottlenecks and NoNorm, DistilBERT's classifier, BEiT's relative position bias, YOLOS's detection
# tokens, BLOOM's ALiBi, OPT's projected embeddings, Phi's partial rotary and parallel blocks) and a YOLO-style
# detector written by hand (_heldout10_net says what each is). name -> (timm model, "hf" or "user", its kwargs,
# input shape).
HELDOUT10: dict[str, tuple[str, dict[str, Any], tuple[int, ...]]] = {
    "timm_rexnet_100": ("rexnet_100", {}, (1, 3, 64, 64)),
    "timm_lcnet_050": ("lcnet_050", {}, (1, 3, 64, 64)),
    "timm_dla34": ("dla34", {}, (1, 3, 64, 64)),
    "timm_dpn68": ("dpn68", {}, (1, 3, 64, 64)),
    "timm_xception41": ("xception41", {}, (1, 3, 64, 64)),
    "timm_res2net50_14w_8s": ("res2net50_14w_8s", {}, (1, 3, 64, 64)),
    "timm_skresnet18": ("skresnet18", {}, (1, 3, 64, 64)),
    "timm_cspdarknet53": ("cspdarknet53", {}, (1, 3, 64, 64)),
    "timm_ese_vovnet19b_dw": ("ese_vovnet19b_dw", {}, (1, 3, 64, 64)),
    "timm_tresnet_m": ("tresnet_m", {}, (1, 3, 64, 64)),
    "timm_starnet_s1": ("starnet_s1", {}, (1, 3, 64, 64)),
    "timm_sequencer2d_s": ("sequencer2d_s", {"img_size": 64}, (1, 3, 64, 64)),
    "timm_davit_tiny": ("davit_tiny", {}, (1, 3, 64, 64)),
    "timm_visformer_tiny": ("visformer_tiny", {"img_size": 64}, (1, 3, 64, 64)),
    "timm_nest_tiny": ("nest_tiny", {"img_size": 64}, (1, 3, 64, 64)),
    "hf_electra": ("hf", {}, (1, 64)),
    "hf_mobilebert": ("hf", {}, (1, 64)),
    "hf_distilbert": ("hf", {}, (1, 64)),
    "hf_beit": ("hf", {}, (1, 3, 64, 64)),
    "hf_yolos": ("hf", {}, (1, 3, 64, 64)),
    "hf_bloom": ("hf", {}, (1, 32)),
    "hf_opt": ("hf", {}, (1, 32)),
    "hf_phi": ("hf", {}, (1, 32)),
    "yolo_tiny": ("user", {}, (1, 3, 128, 128)),
}
# Nets with several float inputs: their names and shapes in the order of forward's arguments (else one `input`).
FLOAT_INPUTS = {"mlp_bn": (("features", (3, 32)), ("meta", (3, 8))),
                "hf_vit": (("pixel_values", HELDOUT6["hf_vit"]),),
                "hf_mobilevit": (("pixel_values", HELDOUT6["hf_mobilevit"]),),
                "hf_segformer": (("pixel_values", HELDOUT6["hf_segformer"]),),
                "hf_convnextv2": (("pixel_values", HELDOUT6["hf_convnextv2"]),),
                "hf_clip_vision": (("pixel_values", HELDOUT6["hf_clip_vision"]),),
                "hf_wav2vec2": (("input_values", HELDOUT6["hf_wav2vec2"]),),
                "hf_whisper_encoder": (("input_features", HELDOUT6["hf_whisper_encoder"]),),
                "tfm_decoder": (("tgt", (1, 32, 128)), ("memory", (1, 48, 128))),
                "hf_dinov2": (("pixel_values", HELDOUT9["hf_dinov2"][2]),),
                "hf_swin": (("pixel_values", HELDOUT9["hf_swin"][2]),),
                "tv_raft_small": (("image1", HELDOUT9["tv_raft_small"][2]), ("image2", HELDOUT9["tv_raft_small"][2])),
                "hf_beit": (("pixel_values", HELDOUT10["hf_beit"][2]),),
                "hf_yolos": (("pixel_values", HELDOUT10["hf_yolos"][2]),)}
# Nets with several outputs: their names in the order forward returns them (else one `output`).
OUTPUT_NAMES = {"pool_heads": ("logits", "label"), "hf_qwen2": ("logits",), "hf_llama": ("logits",), "mlp_bn": ("logits", "value", "label"),
                "wide_batch3": ("logits", "top_scores", "top_classes"), **HF_OUTPUTS,
                "ssdlite_head": ("bbox_regression", "cls_logits"),
                "fcos_head": ("cls_logits", "bbox_regression", "bbox_ctrness"),
                "hf_albert": ("last_hidden_state", "pooler_output"), "hf_deberta_v2": ("last_hidden_state",),
                "hf_roberta": ("last_hidden_state", "pooler_output"), "hf_bart": ("logits",),
                "hf_gemma2": ("logits",), "hf_mamba": ("logits",), "hf_squeezebert": ("last_hidden_state",),
                "hf_dinov2": ("last_hidden_state", "pooler_output"), "hf_swin": ("last_hidden_state", "pooler_output"),
                "tv_raft_small": ("flow",), "hf_electra": ("last_hidden_state",),
                "hf_mobilebert": ("last_hidden_state", "pooler_output"), "hf_distilbert": ("logits",),
                "hf_beit": ("logits",), "hf_yolos": ("logits", "pred_boxes"), "hf_bloom": ("logits",),
                "hf_opt": ("logits",), "hf_phi": ("logits",), "yolo_tiny": ("boxes", "scores")}
# Nets that take token ids (int64, < VOCAB) and, for distilbert_tiny, an attention mask: their input names in
# the order of forward's arguments (random_feeds makes their values).
TOKEN_INPUTS = {"gpt_tiny": ("input_ids",), "distilbert_tiny": ("input_ids", "attention_mask"),
                "hf_bert": ("input_ids", "attention_mask"), "hf_gpt2": ("input_ids", "attention_mask"),
                "hf_t5_encoder": ("input_ids", "attention_mask"), "llama_block": ("input_ids",),
                "hf_qwen2": ("input_ids",), "hf_llama": ("input_ids",),
                "hf_albert": ("input_ids", "attention_mask"), "hf_deberta_v2": ("input_ids", "attention_mask"),
                "hf_roberta": ("input_ids", "attention_mask"),
                "hf_bart": ("input_ids", "attention_mask", "decoder_input_ids"), "hf_gemma2": ("input_ids",),
                "hf_mamba": ("input_ids",), "hf_squeezebert": ("input_ids", "attention_mask"),
                "hf_electra": ("input_ids", "attention_mask"), "hf_mobilebert": ("input_ids", "attention_mask"),
                "hf_distilbert": ("input_ids", "attention_mask"), "hf_bloom": ("input_ids", "attention_mask"),
                "hf_opt": ("input_ids", "attention_mask"), "hf_phi": ("input_ids",)}
VOCAB = 1000
# torchvision models outside its classification list: name -> (module, input shape). Segmentation nets return
# their "out" map (aux heads off: aux_loss None, no backbone weights); video nets take a 8-frame 112x112 clip.
TORCHVISION_OTHER = {"lraspp_mobilenet_v3_large": ("segmentation", (1, 3, 224, 224)),
                     "deeplabv3_mobilenet_v3_large": ("segmentation", (1, 3, 224, 224)),
                     "fcn_resnet50": ("segmentation", (1, 3, 224, 224)),
                     "r3d_18": ("video", (1, 3, 8, 112, 112)), "mc3_18": ("video", (1, 3, 8, 112, 112)),
                     "r2plus1d_18": ("video", (1, 3, 8, 112, 112))}

# Other exports (--variant): keyword arguments of torch.onnx.export ("export"), of quantize_static ("quant": names
# of QuantType members for the types; "extra": its extra_options), and of the input ("batch", "side", "nhwc",
# "dynamic_batch"). Anything not given is the recipe's.
VARIANTS: dict[str, dict[str, Any]] = {
    "dynamo": {"export": {"dynamo": True}},  # the exporter's own default opset
    "dynamo13": {"export": {"dynamo": True, "opset_version": 13}},
    "dynamo18": {"export": {"dynamo": True, "opset_version": 18}},
    "dynamo21": {"export": {"dynamo": True, "opset_version": 21}},
    # the dynamo exporter at a newer opset with per-channel weights (held-out set 10)
    "dynamo18_per_channel": {"export": {"dynamo": True, "opset_version": 18}, "quant": {"per_channel": True}},
    "dynamo21_per_channel": {"export": {"dynamo": True, "opset_version": 21}, "quant": {"per_channel": True}},
    "opset13": {"export": {"opset_version": 13}},
    "opset18": {"export": {"opset_version": 18}},
    "opset20": {"export": {"opset_version": 20}},
    "per_channel": {"quant": {"per_channel": True}},
    "uint8": {"quant": {"activation_type": "QUInt8"}},  # uint8 activations, int8 weights (the old default)
    "u8u8": {"quant": {"activation_type": "QUInt8", "weight_type": "QUInt8"}},
    "reduce_range": {"quant": {"reduce_range": True}},
    "symmetric": {"quant": {"extra": {"ActivationSymmetric": True, "WeightSymmetric": True}}},
    "symmetric_per_channel": {"quant": {"per_channel": True,
                                        "extra": {"ActivationSymmetric": True, "WeightSymmetric": True}}},
    "uint8_per_channel": {"quant": {"activation_type": "QUInt8", "per_channel": True, "reduce_range": True}},
    "dynamic_batch": {"dynamic_batch": True},
    "batch2": {"batch": 2},
    "side160": {"side": 160},
    "nhwc": {"nhwc": True},
    "dynamic": {"dynamic": True},  # quantize_dynamic
    "converted21": {"convert": 21},  # the recipe's quantized files moved to opset 21 by onnx's version converter
    # The quantizer's other options, as its docs and issues show users setting them ("exclude": "ends" leaves the
    # first and the last matrix product in float, from the float graph's node names; "preprocess": onnxruntime's
    # quant_pre_process first, its docs' recommended step; "calibrate": a CalibrationMethod member's name).
    "exclude_ends": {"quant": {"exclude": "ends"}},
    "conv_matmul_only": {"quant": {"op_types_to_quantize": ["Conv", "MatMul"]}},  # float islands in between
    "float_bias": {"quant": {"extra": {"QuantizeBias": False}}},
    "qdq_weight": {"quant": {"extra": {"AddQDQPairToWeight": True}}},  # float weights, then Q -> DQ
    "dedicated_qdq": {"quant": {"extra": {"DedicatedQDQPair": True}}},
    "contrib_qdq": {"quant": {"extra": {"UseQDQContribOps": True}}},  # com.microsoft Q/DQ
    "keep_act": {"quant": {"extra": {"QDQKeepRemovableActivations": True}}},
    "act_symmetric": {"quant": {"extra": {"ActivationSymmetric": True}}},
    "matmul_const_b": {"quant": {"extra": {"MatMulConstBOnly": True}}},
    "percentile": {"quant": {"calibrate": "Percentile"}},
    "entropy": {"quant": {"calibrate": "Entropy"}},
    "distribution": {"quant": {"calibrate": "Distribution"}},
    # 16-bit activations, 4-bit weights: onnxruntime's quantizer writes them in QDQ form only ("Only
    # QuantFormat.QDQ supports 16-bit quantization types"); for 4 bits it moves the model to opset 21
    "int16": {"quant": {"activation_type": "QInt16"}, "formats": ("qdq",)},
    "uint16": {"quant": {"activation_type": "QUInt16"}, "formats": ("qdq",)},
    "int4": {"quant": {"weight_type": "QInt4"}, "formats": ("qdq",)},
    "preprocessed": {"preprocess": {}},
    # its symbolic shape inference fails on the BERT layer (an assertion in _infer_Reshape); users then skip it
    "preprocessed_nosym": {"preprocess": {"skip_symbolic_shape": True}},
    # Not onnxruntime's quantizer: a quantization-aware-training model as torch writes it (`torch_qat`, _qat_net):
    # BatchNorm folded into the convs, each conv / linear input fake-quantized per tensor (int8, asymmetric) and
    # its weight per output channel (int8, symmetric), observers run on the calibration inputs, exported by
    # torch.onnx: QuantizeLinear -> DequantizeLinear pairs on those inputs and weights only, no output quantized.
    "torch_qat": {"qat": True, "formats": ("qdq",)},
}


def _transformer(name: str) -> Any:
    """A BERT-base encoder layer (post-norm, GELU) or a GPT-2 block (pre-norm, GELU, causal self-attention)."""
    import torch

    gpt = name == "gpt2_block"
    layer = torch.nn.TransformerEncoderLayer(WIDTH, HEADS, FFN, dropout=0.0, activation="gelu", batch_first=True,
                                             norm_first=gpt)

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = layer
            self.register_buffer("mask", torch.triu(torch.full((SEQ, SEQ), float("-inf")), 1) if gpt else None)

        def forward(self, x: Any) -> Any:
            return self.layer(x, src_mask=self.mask)

    return Block()


def _user_net(name: str) -> Any:
    """One of USER_NETS, written as a user would (plain torch.nn modules, seeded initialisation)."""
    import torch
    from torch import nn

    if name in HELDOUT7:
        return _heldout7_net(name)

    def bn_relu_1d(ci: int, co: int, k: int, stride: int = 1, dilation: int = 1) -> Any:
        return nn.Sequential(nn.Conv1d(ci, co, k, stride, padding=dilation * (k - 1) // 2, dilation=dilation),
                             nn.BatchNorm1d(co), nn.ReLU())

    if name == "m5_audio":
        return nn.Sequential(bn_relu_1d(1, 32, 80, stride=4), nn.MaxPool1d(4), bn_relu_1d(32, 32, 3), nn.MaxPool1d(4),
                             bn_relu_1d(32, 64, 3), nn.MaxPool1d(4), bn_relu_1d(64, 64, 3), nn.MaxPool1d(4),
                             nn.AdaptiveAvgPool1d(1), nn.Flatten(), nn.Linear(64, 35))
    if name == "tcn_kws":
        class Block(nn.Module):
            def __init__(self, ci: int, co: int, dilation: int) -> None:
                super().__init__()
                self.a = bn_relu_1d(ci, co, 3, dilation=dilation)
                self.b = nn.Sequential(nn.Conv1d(co, co, 3, padding=dilation, dilation=dilation), nn.BatchNorm1d(co))
                self.short = nn.Conv1d(ci, co, 1) if ci != co else nn.Identity()

            def forward(self, x: Any) -> Any:
                return torch.relu(self.b(self.a(x)) + self.short(x))

        class TCN(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.blocks = nn.Sequential(Block(40, 64, 1), Block(64, 64, 2), Block(64, 128, 4), Block(128, 128, 8))
                self.head = nn.Linear(128, 12)

            def forward(self, x: Any) -> Any:
                return self.head(self.blocks(x).mean(dim=-1))

        return TCN()
    if name == "unet_small":
        def double(ci: int, co: int) -> Any:
            return nn.Sequential(nn.Conv2d(ci, co, 3, padding=1, bias=False), nn.BatchNorm2d(co), nn.ReLU(),
                                 nn.Conv2d(co, co, 3, padding=1, bias=False), nn.BatchNorm2d(co), nn.ReLU())

        class UNet(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.d1, self.d2, self.d3, self.d4 = double(3, 32), double(32, 64), double(64, 128), double(128, 256)
                self.pool = nn.MaxPool2d(2)
                self.up3 = nn.ConvTranspose2d(256, 128, 2, stride=2)
                self.u3 = double(256, 128)
                self.up2 = nn.Sequential(nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False),
                                         nn.Conv2d(128, 64, 1))
                self.u2 = double(128, 64)
                self.up1 = nn.ConvTranspose2d(64, 32, 2, stride=2)
                self.u1 = double(64, 32)
                self.head = nn.Conv2d(32, 4, 1)

            def forward(self, x: Any) -> Any:
                x1 = self.d1(x)
                x2 = self.d2(self.pool(x1))
                x3 = self.d3(self.pool(x2))
                x4 = self.d4(self.pool(x3))
                y = self.u3(torch.cat([self.up3(x4), x3], 1))
                y = self.u2(torch.cat([self.up2(y), x2], 1))
                y = self.u1(torch.cat([self.up1(y), x1], 1))
                return self.head(y)

        return UNet()
    if name == "dscnn_kws":
        def separable(c: int) -> Any:
            return nn.Sequential(nn.Conv1d(c, c, 3, padding=1, groups=c), nn.BatchNorm1d(c), nn.ReLU(),
                                 nn.Conv1d(c, c, 1), nn.BatchNorm1d(c), nn.ReLU())

        return nn.Sequential(bn_relu_1d(40, 64, 3), *(separable(64) for _ in range(4)), nn.AdaptiveAvgPool1d(1),
                             nn.Flatten(), nn.Linear(64, 12))
    if name in ("lstm_kws", "gru_kws"):
        class Recurrent(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.rnn = (nn.LSTM if name == "lstm_kws" else nn.GRU)(40, 64, batch_first=True)
                self.head = nn.Linear(64, 12)

            def forward(self, x: Any) -> Any:
                return self.head(self.rnn(x)[0][:, -1])

        return Recurrent()
    if name == "mixer_small":
        def mlp(d: int, hidden: int) -> Any:
            return nn.Sequential(nn.Linear(d, hidden), nn.GELU(), nn.Linear(hidden, d))

        class MixerBlock(nn.Module):
            def __init__(self, tokens: int, width: int) -> None:
                super().__init__()
                self.n1, self.n2 = nn.LayerNorm(width), nn.LayerNorm(width)
                self.tokens, self.channels = mlp(tokens, 2 * tokens), mlp(width, 2 * width)

            def forward(self, x: Any) -> Any:
                x = x + self.tokens(self.n1(x).transpose(1, 2)).transpose(1, 2)
                return x + self.channels(self.n2(x))

        class Mixer(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.stem = nn.Conv2d(3, 128, 8, stride=8)
                self.blocks = nn.Sequential(*(MixerBlock(64, 128) for _ in range(4)))
                self.norm, self.head = nn.LayerNorm(128), nn.Linear(128, 10)

            def forward(self, x: Any) -> Any:
                x = self.blocks(self.stem(x).flatten(2).transpose(1, 2))
                return self.head(self.norm(x).mean(dim=1))

        return Mixer()
    if name in TOKEN_INPUTS:
        gpt = name == "gpt_tiny"
        seq, width, heads = USER_NETS[name][1], 128, 4

        class Attention(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
                self.register_buffer("causal", torch.tril(torch.ones(seq, seq, dtype=torch.bool)))

            def forward(self, x: Any, mask: Any) -> Any:
                q, k, v = (t.view(1, seq, heads, -1).transpose(1, 2) for t in self.qkv(x).split(width, dim=2))
                scores = q @ k.transpose(-2, -1) / (width // heads) ** 0.5
                if gpt:
                    scores = scores.masked_fill(~self.causal, float("-inf"))
                else:
                    scores = scores.masked_fill((mask == 0).view(1, 1, 1, seq), torch.finfo(scores.dtype).min)
                return self.proj((scores.softmax(-1) @ v).transpose(1, 2).reshape(1, seq, width))

        class Layer(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.attn, self.n1, self.n2 = Attention(), nn.LayerNorm(width), nn.LayerNorm(width)
                self.ffn = nn.Sequential(nn.Linear(width, 4 * width),
                                         nn.GELU(approximate="tanh" if gpt else "none"), nn.Linear(4 * width, width))

            def forward(self, x: Any, mask: Any) -> Any:
                if gpt:  # pre-norm
                    x = x + self.attn(self.n1(x), mask)
                    return x + self.ffn(self.n2(x))
                x = self.n1(x + self.attn(x, mask))
                return self.n2(x + self.ffn(x))

        class TokenNet(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.tokens, self.positions = nn.Embedding(VOCAB, width), nn.Embedding(seq, width)
                self.register_buffer("position_ids", torch.arange(seq).expand(1, -1))
                self.layers = nn.ModuleList(Layer() for _ in range(2))
                self.norm = nn.LayerNorm(width)
                self.head = nn.Linear(width, VOCAB) if gpt else nn.Sequential(
                    nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 2))

            def forward(self, input_ids: Any, attention_mask: Any = None) -> Any:
                x = self.norm(self.tokens(input_ids) + self.positions(self.position_ids))
                for layer in self.layers:
                    x = layer(x, attention_mask)
                return self.head(x) if gpt else self.head(x[:, 0])

        return TokenNet()
    if name in HELDOUT5:
        return _coverage_net(name)
    raise ValueError(f"{name} is not one of {' '.join(USER_NETS)}")


def _coverage_net(name: str) -> Any:
    """One of HELDOUT5: ops and attributes users' models contain, in plain torch.nn as users write them.

    convs_zoo: an odd, non-square image (65 x 49) through a stride-2 conv, padding='same' with an even kernel
    (asymmetric pads), padding_mode 'reflect' and 'replicate' (a Pad before the conv), groups=3 and groups=6,
    a depthwise conv with channel multiplier 2, dilation 2, 1x7 and 7x1 kernels, a 4x4 stride-2 conv.
    gan_decoder: a DCGAN-style generator from a 16-d latent: Linear, ConvTranspose 4x4 stride 2 pad 1,
    ConvTranspose 3x3 stride 2 with output_padding, BatchNorm, nearest and bilinear (align_corners=True) Upsample
    concatenated, PixelShuffle, bilinear interpolate by a scale factor (align_corners=False), Tanh out.
    pool_heads: MaxPool ceil_mode, AvgPool with padding count_include_pad False and True, AdaptiveAvgPool 6x6 -> 3x3
    (torch's exporter refuses an output size that does not divide the input's, e.g. 7 -> 3), logits and their argmax (int64) as two outputs.
    acts_zoo: a conv stack with LeakyReLU, PReLU, SiLU, Mish, GELU(tanh), ReLU6, Hardtanh, ELU, Softplus, Tanh.
    norms_cnn: GroupNorm, InstanceNorm (affine), LayerNorm over channels (channels-last permute), GELU.
    mlp_bn: batch 3, two float inputs, an MLP only: x @ W + b (MatMul), torch.addmm (Gemm with transB=0),
    BatchNorm1d, nn.Linear; three outputs (logits, a value, the argmax int64).
    attn_rope: 32 tokens of width 64: RMSNorm (hand-written: nn.RMSNorm does not export at opset 17), rotary embeddings (sin / cos tables, halves sliced and
    concatenated), F.scaled_dot_product_attention with is_causal and without a mask, nn.MultiheadAttention
    (batch_first), an einsum with a constant weight, a 3-D x @ W.
    wide_batch3: batch 3 of 96 x 160 images, a small strided CNN, logits and topk(3) values and indices."""
    import torch
    from torch import nn
    from torch.nn import functional as F

    if name == "convs_zoo":
        class Convs(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.layers = nn.Sequential(
                    nn.Conv2d(3, 24, 3, stride=2, padding=1), nn.ReLU(),                    # 65x49 -> 33x25
                    nn.Conv2d(24, 24, 4, padding="same"), nn.ReLU(),                       # pads 1 / 2
                    nn.Conv2d(24, 24, 3, padding=1, padding_mode="reflect"), nn.ReLU(),
                    nn.Conv2d(24, 24, 3, padding=1, padding_mode="replicate", groups=3), nn.ReLU(),
                    nn.Conv2d(24, 48, 3, padding=1, groups=24), nn.ReLU(),                 # depthwise x2
                    nn.Conv2d(48, 48, 3, padding=2, dilation=2, groups=6), nn.ReLU(),
                    nn.Conv2d(48, 32, (1, 7), padding=(0, 3)), nn.ReLU(),
                    nn.Conv2d(32, 32, (7, 1), padding=(3, 0)), nn.ReLU(),
                    nn.Conv2d(32, 32, 4, stride=2, padding=1), nn.ReLU())                  # 33x25 -> 16x12
                self.head = nn.Linear(32, 10)

            def forward(self, x: Any) -> Any:
                return self.head(self.layers(x).mean(dim=(2, 3)))

        return Convs()
    if name == "gan_decoder":
        class Generator(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.fc = nn.Linear(16, 64 * 4 * 4)
                self.up1 = nn.Sequential(nn.ConvTranspose2d(64, 32, 4, stride=2, padding=1, bias=False),
                                         nn.BatchNorm2d(32), nn.ReLU())                   # 4 -> 8
                self.up2 = nn.Sequential(nn.ConvTranspose2d(32, 16, 3, stride=2, padding=1, output_padding=1),
                                         nn.BatchNorm2d(16), nn.ReLU())                   # 8 -> 16
                self.nearest = nn.Upsample(scale_factor=2, mode="nearest")
                self.bilinear = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True)
                self.mix = nn.Sequential(nn.Conv2d(32, 32, 3, padding=1), nn.ReLU())       # 32x32
                self.shuffle = nn.PixelShuffle(2)                                         # 8ch 64x64
                self.out = nn.Conv2d(8, 3, 3, padding=1)

            def forward(self, z: Any) -> Any:
                x = self.fc(z).view(-1, 64, 4, 4)
                x = self.up2(self.up1(x))
                x = self.mix(torch.cat([self.nearest(x), self.bilinear(x)], 1))
                x = self.shuffle(x)
                x = F.interpolate(x, scale_factor=0.75, mode="bilinear", align_corners=False)  # 64 -> 48
                return torch.tanh(self.out(x))

        return Generator()
    if name == "pool_heads":
        class Pools(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.c1 = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU())
                self.p1 = nn.MaxPool2d(3, 2, ceil_mode=True)                              # 48 -> 24
                self.c2 = nn.Sequential(nn.Conv2d(16, 32, 3, padding=1), nn.ReLU())
                self.p2 = nn.AvgPool2d(3, 2, padding=1, count_include_pad=False)          # 24 -> 12
                self.c3 = nn.Sequential(nn.Conv2d(32, 32, 3, padding=1), nn.ReLU())
                self.p3 = nn.AvgPool2d(3, 2, padding=1, count_include_pad=True)           # 12 -> 6
                self.p4 = nn.AdaptiveAvgPool2d(3)                                         # 6 -> 3
                self.head = nn.Linear(32 * 9, 10)

            def forward(self, x: Any) -> Any:
                x = self.p4(self.p3(self.c3(self.p2(self.c2(self.p1(self.c1(x)))))))
                logits = self.head(x.flatten(1))
                return logits, logits.argmax(dim=1)

        return Pools()
    if name == "acts_zoo":
        acts = [nn.LeakyReLU(0.1), nn.PReLU(16), nn.SiLU(), nn.Mish(), nn.GELU(approximate="tanh"), nn.ReLU6(),
                nn.Hardtanh(-2.0, 2.0), nn.ELU(), nn.Softplus(), nn.Tanh()]
        layers: list[Any] = []
        for i, act in enumerate(acts):
            layers += [nn.Conv2d(3 if i == 0 else 16, 16, 3, padding=1), act]
        return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))
    if name == "norms_cnn":
        class ChannelsLastNorm(nn.Module):
            def __init__(self, c: int) -> None:
                super().__init__()
                self.norm = nn.LayerNorm(c)

            def forward(self, x: Any) -> Any:
                return self.norm(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)

        return nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.GroupNorm(4, 32), nn.ReLU(),
                             nn.Conv2d(32, 32, 3, stride=2, padding=1), nn.InstanceNorm2d(32, affine=True), nn.ReLU(),
                             nn.Conv2d(32, 32, 3, padding=1), ChannelsLastNorm(32), nn.GELU(),
                             nn.Conv2d(32, 32, 1), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))
    if name == "mlp_bn":
        class MLP(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.w1, self.b1 = nn.Parameter(torch.randn(32, 64) / 32 ** 0.5), nn.Parameter(torch.zeros(64))
                self.bn1 = nn.BatchNorm1d(64)
                self.w2, self.b2 = nn.Parameter(torch.randn(72, 48) / 72 ** 0.5), nn.Parameter(torch.randn(48) / 10)
                self.bn2 = nn.BatchNorm1d(48)
                self.cls, self.value = nn.Linear(48, 5), nn.Linear(48, 1)

            def forward(self, features: Any, meta: Any) -> Any:
                h = torch.relu(self.bn1(features @ self.w1 + self.b1))
                h = torch.relu(self.bn2(torch.addmm(self.b2, torch.cat([h, meta], 1), self.w2)))
                logits = self.cls(h)
                return logits, self.value(h), logits.argmax(dim=1)

        return MLP()
    if name == "attn_rope":
        seq, width, heads = 32, 64, 4
        dh = width // heads

        class RMSNorm(nn.Module):  # as LLaMA-style code writes it (torch's nn.RMSNorm has no opset-17 export)
            def __init__(self, d: int, eps: float = 1e-6) -> None:
                super().__init__()
                self.eps, self.weight = eps, nn.Parameter(torch.ones(d))

            def forward(self, x: Any) -> Any:
                return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight

        def rope(t: Any, cos: Any, sin: Any) -> Any:
            t1, t2 = t[..., : dh // 2], t[..., dh // 2:]
            return t * cos + torch.cat([-t2, t1], dim=-1) * sin

        class Block(nn.Module):
            def __init__(self, causal: bool) -> None:
                super().__init__()
                self.causal = causal
                self.norm = RMSNorm(width)
                self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
                inv = 1.0 / 10000 ** (torch.arange(0, dh, 2).float() / dh)
                ang = torch.outer(torch.arange(seq).float(), inv)
                ang = torch.cat([ang, ang], dim=-1)
                self.register_buffer("cos", ang.cos())
                self.register_buffer("sin", ang.sin())

            def forward(self, x: Any) -> Any:
                q, k, v = (t.view(1, seq, heads, dh).transpose(1, 2)
                           for t in self.qkv(self.norm(x)).chunk(3, dim=-1))
                if self.causal:
                    q, k = rope(q, self.cos, self.sin), rope(k, self.cos, self.sin)
                y = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
                return x + self.proj(y.transpose(1, 2).reshape(1, seq, width))

        class Net(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.b1, self.b3 = Block(True), Block(False)
                self.n2 = nn.LayerNorm(width)
                self.mha = nn.MultiheadAttention(width, heads, batch_first=True)
                self.w_in = nn.Parameter(torch.randn(width, 2 * width) / width ** 0.5)
                self.w_out = nn.Parameter(torch.randn(2 * width, width) / (2 * width) ** 0.5)
                self.norm = RMSNorm(width)

            def forward(self, x: Any) -> Any:
                x = self.b1(x)
                h = self.n2(x)
                x = x + self.mha(h, h, h, need_weights=False)[0]
                x = self.b3(x)
                h = F.silu(torch.einsum("bnd,df->bnf", self.norm(x), self.w_in))
                return x + h @ self.w_out

        return Net()
    if name == "wide_batch3":
        class Wide(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.features = nn.Sequential(
                    nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16), nn.ReLU(),    # 48x80
                    nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.BatchNorm2d(32), nn.ReLU(),   # 24x40
                    nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.BatchNorm2d(64), nn.ReLU(),   # 12x20
                    nn.Conv2d(64, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(),
                    nn.AdaptiveAvgPool2d(1), nn.Flatten())
                self.head = nn.Linear(64, 20)

            def forward(self, x: Any) -> Any:
                logits = self.head(self.features(x))
                scores, classes = logits.softmax(-1).topk(3, dim=-1)
                return logits, scores, classes

        return Wide()
    raise ValueError(f"{name} is not one of {' '.join(HELDOUT5)}")


def _heldout7_net(name: str) -> Any:
    """One of HELDOUT7: families the held-out sets before did not hold, as users write them.

    ssdlite_head: torchvision's ssdlite320_mobilenet_v3_large, its backbone (with its extra blocks) and SSD-Lite
    head on a 320 x 320 image, returning the head's box regression and class logits (no anchors, decoding or NMS:
    what a deployment offloads); fcos_head: torchvision's fcos_resnet50_fpn the same way (ResNet-50, FPN with P6 /
    P7, GroupNorm towers; class logits, boxes, centerness) on 128 x 128. stn_net: a spatial transformer (an MNIST
    localisation net -> a 2 x 3 affine theta, F.affine_grid + F.grid_sample, then a small classifier).
    pointnet_cls: PointNet on 1024 points (an input T-Net: Conv1d 1x1 + BatchNorm, global max, FC to a 3 x 3 matrix
    plus identity, torch.bmm with the points; shared MLP by Conv1d; torch.max over points; BatchNorm1d head).
    tfm_decoder: nn.TransformerDecoder (2 post-norm layers of width 128, 4 heads, ReLU FFN) on 32 target tokens
    with a causal mask from nn.Transformer.generate_square_subsequent_mask and cross-attention to a 48-token
    memory (two float inputs). conformer_block: a Conformer encoder on 64 frames of 80 features (Linear in, two
    blocks: half-step SiLU FFNs, nn.MultiheadAttention, the conv module: pointwise Conv1d, GLU, depthwise Conv1d
    k=15, BatchNorm1d, SiLU, pointwise), mean over time to 10 classes. llama_block: a LLaMA-style decoder over 32
    tokens (Embedding, RMSNorm, rotary embeddings, grouped-query attention: 8 query heads, 2 key / value heads
    repeated by repeat_interleave, scores by torch.einsum with an additive causal mask, SwiGLU FFN, tied-free LM
    head). crnn_ocr: a CRNN text recogniser (32 x 128 grey image, convs + BatchNorm, MaxPool2d((2, 1)) and a
    (2, 1)-strided conv, height squeezed, a 2-layer bidirectional LSTM, per-column log_softmax over 37 classes).
    tsm_ghost: a video clip of 4 frames (N, T, C, H, W) through a temporal shift module (channel folds shifted a
    frame forward / back by slice assignment into zeros), RepVGG-style blocks in their training form (3x3 + 1x1 +
    identity BatchNorm branches summed), Ghost modules (a primary conv, cheap depthwise ops, concatenated and
    sliced), GroupNorm, averaged over frames. sr_edsr: an EDSR-style super-resolution net (no BatchNorm, residual
    blocks scaled by 0.1, x2 twice by conv + PixelShuffle, a bicubic-upsampled global skip, a depthwise
    ConvTranspose2d bilinear-style upsampler). convs_zoo2: asymmetric strides (1, 2) and (2, 1), dilation (2, 1),
    padding_mode 'circular', MaxPool2d with dilation 2, AvgPool2d ceil_mode, LPPool2d, AdaptiveMaxPool2d,
    a grouped 1x1 conv with channel shuffle, a 5x5 depthwise conv at stride 2."""
    import torch
    from torch import nn
    from torch.nn import functional as F

    if name in ("ssdlite_head", "fcos_head"):
        torchvision = _import_torchvision()
        det = torchvision.models.get_model("ssdlite320_mobilenet_v3_large" if name == "ssdlite_head"
                                           else "fcos_resnet50_fpn", weights=None, weights_backbone=None)
        keys = OUTPUT_NAMES[name]

        class Head(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.backbone, self.head = det.backbone, det.head

            def forward(self, x: Any) -> Any:
                got = self.head(list(self.backbone(x).values()))
                return tuple(got[k] for k in keys)

        return Head()
    if name == "stn_net":
        class STN(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.loc = nn.Sequential(nn.Conv2d(1, 8, 7), nn.MaxPool2d(2), nn.ReLU(),
                                         nn.Conv2d(8, 10, 5), nn.MaxPool2d(2), nn.ReLU())      # 32 -> 26 -> 13 -> 9 -> 4
                self.fc_loc = nn.Sequential(nn.Linear(10 * 4 * 4, 32), nn.ReLU(), nn.Linear(32, 6))
                self.fc_loc[2].weight.data.mul_(0.1)
                self.fc_loc[2].bias.data.copy_(torch.tensor([1, 0, 0, 0, 1, 0], dtype=torch.float))
                self.features = nn.Sequential(nn.Conv2d(1, 16, 5), nn.MaxPool2d(2), nn.ReLU(),
                                              nn.Conv2d(16, 32, 5), nn.MaxPool2d(2), nn.ReLU())  # 32 -> 5
                self.head = nn.Sequential(nn.Linear(32 * 5 * 5, 64), nn.ReLU(), nn.Linear(64, 10))

            def forward(self, x: Any) -> Any:
                theta = self.fc_loc(self.loc(x).view(-1, 10 * 4 * 4)).view(-1, 2, 3)
                grid = F.affine_grid(theta, list(x.size()), align_corners=False)
                x = F.grid_sample(x, grid, align_corners=False)
                return F.log_softmax(self.head(self.features(x).flatten(1)), dim=1)

        return STN()
    if name == "pointnet_cls":
        def shared_mlp(*widths: int) -> Any:
            layers: list[Any] = []
            for ci, co in zip(widths, widths[1:]):
                layers += [nn.Conv1d(ci, co, 1), nn.BatchNorm1d(co), nn.ReLU()]
            return nn.Sequential(*layers)

        class TNet(nn.Module):
            def __init__(self, k: int) -> None:
                super().__init__()
                self.k = k
                self.mlp = shared_mlp(k, 64, 128, 256)
                self.fc = nn.Sequential(nn.Linear(256, 128), nn.BatchNorm1d(128), nn.ReLU(), nn.Linear(128, k * k))

            def forward(self, x: Any) -> Any:
                g = torch.max(self.mlp(x), 2, keepdim=True)[0].view(-1, 256)
                eye = torch.eye(self.k, dtype=x.dtype).flatten().view(1, self.k * self.k)
                return (self.fc(g) + eye).view(-1, self.k, self.k)

        class PointNet(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.tnet = TNet(3)
                self.mlp1, self.mlp2 = shared_mlp(3, 64, 64), shared_mlp(64, 128, 512)
                self.head = nn.Sequential(nn.Linear(512, 256), nn.BatchNorm1d(256), nn.ReLU(), nn.Dropout(0.3),
                                          nn.Linear(256, 40))

            def forward(self, x: Any) -> Any:
                x = torch.bmm(x.transpose(2, 1), self.tnet(x)).transpose(2, 1)
                x = self.mlp2(self.mlp1(x))
                return F.log_softmax(self.head(torch.max(x, 2)[0]), dim=1)

        return PointNet()
    if name == "tfm_decoder":
        class Decoder(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                layer = nn.TransformerDecoderLayer(128, 4, 256, dropout=0.1, batch_first=True)
                self.decoder = nn.TransformerDecoder(layer, 2)
                self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(32))

            def forward(self, tgt: Any, memory: Any) -> Any:
                return self.decoder(tgt, memory, tgt_mask=self.mask)

        return Decoder()
    if name == "conformer_block":
        d = 144

        class FFN(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.net = nn.Sequential(nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.SiLU(), nn.Dropout(0.1),
                                         nn.Linear(4 * d, d), nn.Dropout(0.1))

            def forward(self, x: Any) -> Any:
                return x + 0.5 * self.net(x)

        class ConvModule(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.norm = nn.LayerNorm(d)
                self.pw1, self.glu = nn.Conv1d(d, 2 * d, 1), nn.GLU(dim=1)
                self.dw = nn.Conv1d(d, d, 15, padding=7, groups=d)
                self.bn, self.act, self.pw2 = nn.BatchNorm1d(d), nn.SiLU(), nn.Conv1d(d, d, 1)

            def forward(self, x: Any) -> Any:
                y = self.glu(self.pw1(self.norm(x).transpose(1, 2)))
                y = self.pw2(self.act(self.bn(self.dw(y))))
                return x + y.transpose(1, 2)

        class Block(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.ff1, self.ff2, self.conv = FFN(), FFN(), ConvModule()
                self.norm_attn, self.norm_out = nn.LayerNorm(d), nn.LayerNorm(d)
                self.attn = nn.MultiheadAttention(d, 4, dropout=0.1, batch_first=True)

            def forward(self, x: Any) -> Any:
                x = self.ff1(x)
                h = self.norm_attn(x)
                x = x + self.attn(h, h, h, need_weights=False)[0]
                return self.norm_out(self.ff2(self.conv(x)))

        class Conformer(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.inp = nn.Linear(80, d)
                self.blocks = nn.Sequential(Block(), Block())
                self.head = nn.Linear(d, 10)

            def forward(self, x: Any) -> Any:
                return self.head(self.blocks(self.inp(x)).mean(dim=1))

        return Conformer()
    if name == "llama_block":
        seq, width, heads, kv_heads, hidden = HELDOUT7[name][1], 128, 8, 2, 344
        dh = width // heads

        class RMSNorm(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.weight = nn.Parameter(torch.ones(width))

            def forward(self, x: Any) -> Any:
                return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5))

        def rotate_half(t: Any) -> Any:
            return torch.cat((-t[..., dh // 2:], t[..., : dh // 2]), dim=-1)

        class Attention(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.q_proj = nn.Linear(width, heads * dh, bias=False)
                self.k_proj = nn.Linear(width, kv_heads * dh, bias=False)
                self.v_proj = nn.Linear(width, kv_heads * dh, bias=False)
                self.o_proj = nn.Linear(heads * dh, width, bias=False)

            def forward(self, x: Any, cos: Any, sin: Any, mask: Any) -> Any:
                b, n, _ = x.shape
                q = self.q_proj(x).view(b, n, heads, dh).transpose(1, 2)
                k = self.k_proj(x).view(b, n, kv_heads, dh).transpose(1, 2)
                v = self.v_proj(x).view(b, n, kv_heads, dh).transpose(1, 2)
                q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
                k = k.repeat_interleave(heads // kv_heads, dim=1)
                v = v.repeat_interleave(heads // kv_heads, dim=1)
                scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / dh ** 0.5 + mask
                y = torch.einsum("bhqk,bhkd->bhqd", scores.softmax(dim=-1), v)
                return self.o_proj(y.transpose(1, 2).reshape(b, n, width))

        class Layer(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.input_norm, self.post_norm, self.attn = RMSNorm(), RMSNorm(), Attention()
                self.gate = nn.Linear(width, hidden, bias=False)
                self.up = nn.Linear(width, hidden, bias=False)
                self.down = nn.Linear(hidden, width, bias=False)

            def forward(self, x: Any, cos: Any, sin: Any, mask: Any) -> Any:
                x = x + self.attn(self.input_norm(x), cos, sin, mask)
                h = self.post_norm(x)
                return x + self.down(F.silu(self.gate(h)) * self.up(h))

        class Llama(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.embed = nn.Embedding(VOCAB, width)
                self.layers = nn.ModuleList(Layer() for _ in range(2))
                self.norm, self.lm_head = RMSNorm(), nn.Linear(width, VOCAB, bias=False)
                inv = 1.0 / 10000 ** (torch.arange(0, dh, 2).float() / dh)
                ang = torch.outer(torch.arange(seq).float(), inv)
                ang = torch.cat((ang, ang), dim=-1)
                self.register_buffer("cos", ang.cos()[None, None])
                self.register_buffer("sin", ang.sin()[None, None])
                self.register_buffer("mask", torch.full((seq, seq), torch.finfo(torch.float32).min).triu(1))

            def forward(self, input_ids: Any) -> Any:
                x = self.embed(input_ids)
                for layer in self.layers:
                    x = layer(x, self.cos, self.sin, self.mask)
                return self.lm_head(self.norm(x))

        return Llama()
    if name == "crnn_ocr":
        def conv(ci: int, co: int, stride: Any = 1) -> Any:
            return nn.Sequential(nn.Conv2d(ci, co, 3, stride, 1, bias=False), nn.BatchNorm2d(co), nn.ReLU(True))

        class CRNN(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.cnn = nn.Sequential(conv(1, 32), nn.MaxPool2d(2, 2),                       # 16 x 64
                                         conv(32, 64), nn.MaxPool2d(2, 2),                      # 8 x 32
                                         conv(64, 128), conv(128, 128), nn.MaxPool2d((2, 1), (2, 1)),  # 4 x 32
                                         conv(128, 128, stride=(2, 1)),                         # 2 x 32
                                         nn.Conv2d(128, 128, (2, 1)), nn.ReLU())                # 1 x 32
                self.rnn = nn.LSTM(128, 64, num_layers=2, bidirectional=True, batch_first=True)
                self.fc = nn.Linear(128, 37)

            def forward(self, x: Any) -> Any:
                f = self.cnn(x).squeeze(2).permute(0, 2, 1)                                     # N, 32, 128
                return F.log_softmax(self.fc(self.rnn(f)[0]), dim=2)

        return CRNN()
    if name == "tsm_ghost":
        frames = HELDOUT7[name][1]

        def temporal_shift(x: Any, fold_div: int = 8) -> Any:
            nt, c, h, w = x.size()
            x = x.view(nt // frames, frames, c, h, w)
            fold = c // fold_div
            out = torch.zeros_like(x)
            out[:, :-1, :fold] = x[:, 1:, :fold]                  # shift left
            out[:, 1:, fold: 2 * fold] = x[:, :-1, fold: 2 * fold]  # shift right
            out[:, :, 2 * fold:] = x[:, :, 2 * fold:]             # not shifted
            return out.view(nt, c, h, w)

        class RepVGGBlock(nn.Module):
            def __init__(self, ci: int, co: int, stride: int) -> None:
                super().__init__()
                self.dense = nn.Sequential(nn.Conv2d(ci, co, 3, stride, 1, bias=False), nn.BatchNorm2d(co))
                self.one = nn.Sequential(nn.Conv2d(ci, co, 1, stride, 0, bias=False), nn.BatchNorm2d(co))
                self.identity = nn.BatchNorm2d(ci) if ci == co and stride == 1 else None

            def forward(self, x: Any) -> Any:
                y = self.dense(x) + self.one(x)
                return F.relu(y + self.identity(x) if self.identity is not None else y)

        class Ghost(nn.Module):
            def __init__(self, ci: int, co: int, ratio: int = 2) -> None:
                super().__init__()
                self.co = co
                init = -(-co // ratio)
                self.primary = nn.Sequential(nn.Conv2d(ci, init, 1, bias=False), nn.BatchNorm2d(init), nn.ReLU())
                self.cheap = nn.Sequential(nn.Conv2d(init, init * (ratio - 1), 3, 1, 1, groups=init, bias=False),
                                           nn.BatchNorm2d(init * (ratio - 1)), nn.ReLU())

            def forward(self, x: Any) -> Any:
                x1 = self.primary(x)
                return torch.cat([x1, self.cheap(x1)], dim=1)[:, : self.co]

        class TSMNet(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.stem = RepVGGBlock(3, 32, 2)                                                # 32
                self.b1, self.b2 = RepVGGBlock(32, 32, 1), RepVGGBlock(32, 48, 2)                # 16
                self.g1 = Ghost(48, 60)
                self.gn = nn.GroupNorm(6, 60)
                self.b3 = RepVGGBlock(60, 64, 2)                                                 # 8
                self.g2 = Ghost(64, 96)
                self.head = nn.Linear(96, 10)

            def forward(self, x: Any) -> Any:
                n, t = x.shape[:2]
                x = self.stem(x.flatten(0, 1))
                x = self.b1(temporal_shift(x))
                x = self.b2(temporal_shift(x))
                x = F.relu(self.gn(self.g1(temporal_shift(x))))
                x = self.g2(self.b3(x))
                logits = self.head(x.mean(dim=(2, 3)))
                return logits.view(n, t, -1).mean(dim=1)

        return TSMNet()
    if name == "sr_edsr":
        class ResBlock(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.body = nn.Sequential(nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(True), nn.Conv2d(32, 32, 3, padding=1))

            def forward(self, x: Any) -> Any:
                return x + self.body(x).mul(0.1)

        class EDSR(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.head = nn.Conv2d(3, 32, 3, padding=1)
                self.body = nn.Sequential(*(ResBlock() for _ in range(4)), nn.Conv2d(32, 32, 3, padding=1))
                self.up = nn.Sequential(nn.Conv2d(32, 128, 3, padding=1), nn.PixelShuffle(2),
                                        nn.Conv2d(32, 128, 3, padding=1), nn.PixelShuffle(2))        # x4
                self.tail = nn.Conv2d(32, 3, 3, padding=1)
                self.deconv = nn.ConvTranspose2d(3, 3, 8, stride=4, padding=2, groups=3, bias=False)  # x4

            def forward(self, x: Any) -> Any:
                h = self.head(x)
                y = self.tail(self.up(h + self.body(h)))
                skip = F.interpolate(x, scale_factor=4, mode="bicubic", align_corners=False)
                return y + skip + self.deconv(x)

        return EDSR()
    if name == "convs_zoo2":
        class Shuffle(nn.Module):
            def forward(self, x: Any) -> Any:
                n, c, h, w = x.shape
                return x.view(n, 4, c // 4, h, w).transpose(1, 2).contiguous().view(n, c, h, w)

        return nn.Sequential(
            nn.Conv2d(3, 16, 3, stride=(1, 2), padding=1), nn.ReLU(),                              # 40 x 28
            nn.Conv2d(16, 32, (3, 5), stride=(2, 1), padding=(1, 2)), nn.ReLU(),                   # 20 x 28
            nn.Conv2d(32, 32, 3, padding=(2, 1), dilation=(2, 1)), nn.ReLU(),
            nn.Conv2d(32, 32, 3, padding=1, padding_mode="circular"), nn.ReLU(),
            nn.MaxPool2d(3, stride=1, padding=1, dilation=2),                                      # 18 x 26
            nn.Conv2d(32, 32, 1, groups=4), Shuffle(), nn.ReLU(),
            nn.AvgPool2d(3, stride=2, ceil_mode=True),                                             # 9 x 13
            nn.Conv2d(32, 32, 5, stride=2, padding=2, groups=32), nn.BatchNorm2d(32), nn.ReLU6(),  # 5 x 7
            nn.LPPool2d(2, 2, ceil_mode=False),                                                    # 2 x 3
            nn.Conv2d(32, 64, 1), nn.ReLU(),
            nn.AdaptiveMaxPool2d(1), nn.Flatten(), nn.Linear(64, 10))
    raise ValueError(f"{name} is not one of {' '.join(HELDOUT7)}")


def _hf_net(name: str) -> Any:
    """One of HELDOUT6: a Hugging Face `transformers` model built from its config class (small sizes, the library's
    own seeded initialisation, vocabularies of VOCAB tokens, dropout as configured: eval mode at export), its
    attention as the library chooses by default (torch's scaled_dot_product_attention where the model has it),
    returning HF_OUTPUTS[name] of its ModelOutput (use_cache off: no past key / values).

    hf_bert: BertModel, 2 layers of width 128, 4 heads, 64 tokens with an attention mask (the padding as
    random_feeds makes it), the pooler; hf_gpt2: GPT2LMHeadModel, 2 pre-norm causal layers of width 128 (the causal
    mask and the padding mask combined), GELU-tanh (gelu_new), the tied LM head; hf_t5_encoder: T5EncoderModel, 2
    layers of width 128 (d_kv 32, 4 heads, d_ff 512), bucketed relative position bias, RMS-style T5LayerNorm, ReLU;
    hf_vit: ViTForImageClassification, 8 x 8 patches of a 64 x 64 image, 2 layers of width 128, a CLS token, 10
    classes; hf_mobilevit: MobileViTForImageClassification (the xx-small widths, 64 x 64 image: inverted residual
    blocks with BatchNorm and SiLU, MobileViT blocks that unfold 2 x 2 patches into a transformer and fold them
    back); hf_wav2vec2: Wav2Vec2Model on 8000 raw samples (a 7-layer 1-D conv feature encoder with GroupNorm on
    its first layer, a weight-normed grouped positional conv, 2 post-norm layers of width 64); hf_whisper_encoder:
    Whisper's encoder on 80 x 128 log-mel frames (two 1-D convs, the second stride 2, GELU, sinusoidal positions,
    2 pre-norm layers of width 64); hf_segformer: SegformerForSemanticSegmentation (a MiT encoder with overlapping
    patch embeddings and spatial-reduction attention, depth 1 per stage, an all-MLP decoder with BatchNorm,
    bilinear upsampling to a quarter of the 64 x 64 input, 5 classes); hf_convnextv2:
    ConvNextV2ForImageClassification (4 x 4 patchify stem, depths 1 / 1 / 2 / 1 at widths 16-128, 7 x 7 depthwise
    convs, channels-last LayerNorm, GELU, Global Response Normalization: an L2 norm over the spatial axes divided
    by its channel mean, 10 classes); hf_clip_vision: CLIPVisionModel (8 x 8 patches of a 64 x 64 image, a class
    embedding, a pre-LayerNorm, 2 layers of width 64 with quick_gelu, the pooled class token post-LayerNorm)."""
    import torch
    import transformers as tf

    if name == "hf_bert":
        net = tf.BertModel(tf.BertConfig(vocab_size=VOCAB, hidden_size=128, num_hidden_layers=2,
                                         num_attention_heads=4, intermediate_size=512, max_position_embeddings=128))
    elif name == "hf_gpt2":
        net = tf.GPT2LMHeadModel(tf.GPT2Config(vocab_size=VOCAB, n_positions=128, n_embd=128, n_layer=2, n_head=4,
                                               bos_token_id=VOCAB - 1, eos_token_id=VOCAB - 1, use_cache=False))
    elif name == "hf_t5_encoder":
        net = tf.T5EncoderModel(tf.T5Config(vocab_size=VOCAB, d_model=128, d_kv=32, d_ff=512, num_layers=2,
                                            num_heads=4, use_cache=False))
    elif name == "hf_vit":
        net = tf.ViTForImageClassification(tf.ViTConfig(image_size=64, patch_size=8, hidden_size=128,
                                                        num_hidden_layers=2, num_attention_heads=4,
                                                        intermediate_size=512, num_labels=10))
    elif name == "hf_mobilevit":
        net = tf.MobileViTForImageClassification(tf.MobileViTConfig(
            image_size=64, hidden_sizes=[64, 80, 96], neck_hidden_sizes=[16, 16, 24, 48, 64, 80, 320],
            expand_ratio=2.0, num_labels=10))
    elif name == "hf_wav2vec2":
        net = tf.Wav2Vec2Model(tf.Wav2Vec2Config(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                                 intermediate_size=256, conv_dim=(32,) * 7,
                                                 num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4,
                                                 mask_time_prob=0.0))
    elif name == "hf_whisper_encoder":
        from transformers.models.whisper.modeling_whisper import WhisperEncoder

        net = WhisperEncoder(tf.WhisperConfig(d_model=64, encoder_layers=2, encoder_attention_heads=4,
                                              encoder_ffn_dim=256, num_mel_bins=80,
                                              max_source_positions=HELDOUT6[name][2] // 2))
    elif name == "hf_segformer":
        net = tf.SegformerForSemanticSegmentation(tf.SegformerConfig(
            image_size=64, hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1], num_attention_heads=[1, 2, 4, 4],
            decoder_hidden_size=64, num_labels=5))
    elif name == "hf_convnextv2":
        net = tf.ConvNextV2ForImageClassification(tf.ConvNextV2Config(
            image_size=64, hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 2, 1], num_labels=10))
    elif name == "hf_clip_vision":
        net = tf.CLIPVisionModel(tf.CLIPVisionConfig(image_size=64, patch_size=8, hidden_size=64, num_hidden_layers=2,
                                                     num_attention_heads=4, intermediate_size=256))
    else:
        raise ValueError(f"{name} is not one of {' '.join(HELDOUT6)}")
    names = [n for n, _, _ in _inputs(name, HELDOUT6[name])]
    outputs = HF_OUTPUTS[name]

    class Outputs(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = net

        def forward(self, *args: Any) -> Any:
            got = self.net(**dict(zip(names, args)), return_dict=True)
            return tuple(got[k] for k in outputs)

    return Outputs()


def _heldout8_net(name: str) -> Any:
    """One of HELDOUT8. timm models: timm.create_model(model, pretrained=False, **kwargs), timm's own seeded
    initialisation, its default 1000 classes, exported as timm builds them for inference (no reparameterisation of
    RepVGG / MobileOne / FastViT: their training-form branches, as a user exporting without calling
    `reparameterize` gets). hf_qwen2 / hf_llama: Qwen2ForCausalLM / LlamaForCausalLM from their config classes (2
    layers of width 128, 8 query heads and 2 key / value heads: grouped-query attention, RMSNorm, rotary
    embeddings, SwiGLU MLP, causal mask, an untied LM head over VOCAB tokens; Qwen2's q / k / v projections with
    bias), 32 token ids and an all-ones attention mask, returning the logits (use_cache off). timm_eva02_tiny
    does not export (timm's EVA passes is_causal as a tensor to scaled_dot_product_attention under tracing)."""
    import torch

    model, kwargs, _ = HELDOUT8[name]
    if model.startswith("timm.models."):  # a timm model class at sizes none of its registered variants has
        import importlib

        module, _, cls = model.rpartition(".")
        return getattr(importlib.import_module(module), cls)(**kwargs)
    if model != "hf":
        import timm

        return timm.create_model(model, pretrained=False, **kwargs)
    import transformers as tf

    common = {"vocab_size": VOCAB, "hidden_size": 128, "intermediate_size": 352, "num_hidden_layers": 2,
              "num_attention_heads": 8, "num_key_value_heads": 2, "max_position_embeddings": 128,
              "tie_word_embeddings": False, "use_cache": False}
    net = (tf.Qwen2ForCausalLM(tf.Qwen2Config(**common)) if name == "hf_qwen2"
           else tf.LlamaForCausalLM(tf.LlamaConfig(**common)))

    class Logits(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = net

        def forward(self, input_ids: Any) -> Any:
            # an all-ones attention mask, as a tokenizer returns it (without one, transformers looks for packed
            # sequences in the position ids with torch.diff, which torch.onnx cannot export)
            mask = torch.ones_like(input_ids)
            return self.net(input_ids=input_ids, attention_mask=mask, use_cache=False, return_dict=True)["logits"]

    return Logits()


def _heldout9_net(name: str) -> Any:
    """One of HELDOUT9. timm models as for HELDOUT8 (timm.create_model, seeded, no weights, 1000 classes):
    NF-RegNet-B0 (normalizer-free: ScaledStdConv2d standardises each conv's weight in the graph at every call, no
    BatchNorm), ResNeSt-14d (split attention: a radix-2 softmax over grouped-conv branches, average-pool
    downsampling), XCiT-nano (cross-covariance attention over channels with L2-normalised q / k and a learned
    temperature, local patch interaction by depthwise convs, class attention), VOLO-D1 (outlook attention:
    F.unfold / F.fold), EfficientViT-B0 (MIT's: ReLU linear attention, a multi-scale depthwise aggregation),
    MobileViTv2-0.5 (separable self-attention, GroupNorm), HRNet-W18-small (parallel resolutions fused by strided
    convs and nearest upsampling), BoTNet-26t (multi-head self-attention with relative position logits in a
    ResNet), MixNet-S (mixed depthwise kernel sizes 3-11 on channel splits). Hugging Face models from their
    config classes, small sizes, VOCAB tokens: hf_albert (AlbertModel: factorised embeddings, one layer's weights
    shared by 2 layers), hf_deberta_v2 (DebertaV2Model, 2 layers of width 128: disentangled relative-position
    attention with log buckets), hf_roberta (RobertaModel: position ids from a cumulative sum of the non-padding
    tokens), hf_bart (BartForConditionalGeneration: encoder and decoder of 2 layers each, cross-attention, a
    32-token decoder input, the tied LM head), hf_gemma2 (Gemma2ForCausalLM: GeGLU, RMSNorm with 1 + weight,
    attention-logit and final-logit soft-capping by tanh, sliding-window layers), hf_mamba (MambaForCausalLM:
    2 layers of the selective state-space scan in its sequential torch form over 16 tokens, a causal depthwise
    Conv1d), hf_squeezebert (SqueezeBertModel: grouped 1-D convs for q / k / v and the FFN), hf_dinov2
    (Dinov2Model at its default 224 configuration on a 56 x 56 image: position embeddings bicubically
    interpolated to 4 x 4 patches, LayerScale), hf_swin (SwinModel: shifted windows by torch.roll, relative
    position bias). tv_raft_small: torchvision's raft_small on two 128 x 128 frames (its smallest: a 4-level correlation pyramid over 1/8 of the image) (feature and context encoders,
    an all-pairs correlation volume pyramid, grid_sample lookups, a ConvGRU, 3 flow updates), returning the last
    flow."""
    import torch

    model, kwargs, shape = HELDOUT9[name]
    if model == "tv":
        torchvision = _import_torchvision()
        raft = torchvision.models.optical_flow.raft_small(weights=None)

        class Flow(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.raft = raft

            def forward(self, image1: Any, image2: Any) -> Any:
                return self.raft(image1, image2, num_flow_updates=3)[-1]

        return Flow()
    if model != "hf":
        import timm

        return timm.create_model(model, pretrained=False, **kwargs)
    import transformers as tf

    small = {"vocab_size": VOCAB, "hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
             "intermediate_size": 512, "max_position_embeddings": 128}
    if name == "hf_albert":
        net = tf.AlbertModel(tf.AlbertConfig(embedding_size=64, num_hidden_groups=1, **small))
    elif name == "hf_deberta_v2":
        net = tf.DebertaV2Model(tf.DebertaV2Config(relative_attention=True, position_buckets=32,
                                                   pos_att_type=["p2c", "c2p"], max_relative_positions=-1,
                                                   position_biased_input=False, **small))
    elif name == "hf_roberta":
        net = tf.RobertaModel(tf.RobertaConfig(**{**small, "max_position_embeddings": 130}))
    elif name == "hf_bart":
        net = tf.BartForConditionalGeneration(tf.BartConfig(
            vocab_size=VOCAB, d_model=128, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
            decoder_attention_heads=4, encoder_ffn_dim=512, decoder_ffn_dim=512, max_position_embeddings=128,
            use_cache=False))
    elif name == "hf_gemma2":
        net = tf.Gemma2ForCausalLM(tf.Gemma2Config(
            vocab_size=VOCAB, hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=32, max_position_embeddings=128, sliding_window=16, use_cache=False))
    elif name == "hf_mamba":
        net = tf.MambaForCausalLM(tf.MambaConfig(vocab_size=VOCAB, hidden_size=64, state_size=8,
                                                 num_hidden_layers=2, use_cache=False))
    elif name == "hf_squeezebert":
        net = tf.SqueezeBertModel(tf.SqueezeBertConfig(embedding_size=128, **small))
    elif name == "hf_dinov2":
        net = tf.Dinov2Model(tf.Dinov2Config(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                             mlp_ratio=2, patch_size=14))
    elif name == "hf_swin":
        net = tf.SwinModel(tf.SwinConfig(image_size=64, patch_size=4, embed_dim=32, depths=[2, 2],
                                         num_heads=[2, 4], window_size=4))
    else:
        raise ValueError(f"{name} is not one of {' '.join(HELDOUT9)}")
    names = [n for n, _, _ in _inputs(name, shape)]
    outputs = OUTPUT_NAMES[name]

    class Outputs(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = net

        def forward(self, *args: Any) -> Any:
            kw = dict(zip(names, args))
            if name in ("hf_gemma2", "hf_mamba"):
                kw["use_cache"] = False
            if name == "hf_gemma2":  # an all-ones mask, as a tokenizer returns it (see _heldout8_net)
                kw["attention_mask"] = torch.ones_like(args[0])
            got = self.net(**kw, return_dict=True)
            return tuple(got[k] for k in outputs)

    return Outputs()


def _heldout10_net(name: str) -> Any:
    """One of HELDOUT10. timm models as for HELDOUT8 (timm.create_model, seeded, no weights, 1000 classes, 64 x 64
    images): ReXNet-1.0 (SiLU / ReLU6, SE, a residual added to the first channels of a wider output), LCNet-0.5
    (hard-swish depthwise separable convs, SE in the last stages), DLA-34 (hierarchical tree aggregation: Concat ->
    1 x 1 conv roots), DPN-68 (dual path: a residual add on one channel slice, a dense Concat on the other, grouped
    3 x 3 convs), Xception-41 (separable convs, strided residual 1 x 1 shortcuts), Res2Net-50 14w x 8s (each
    block's channels split into 8, each 3 x 3 conv fed the previous split's output plus its own, AvgPool on the
    last split of a strided block), SKNet-ResNet-18 (selective kernel: two dilations' branches summed, pooled, a
    softmax over the branches weighting them), CSPDarkNet-53 (cross-stage partial stages, Mish), eSE-VoVNet-19b-dw
    (one-shot aggregation Concat of every layer, effective SE with hard sigmoid), TResNet-M (space-to-depth stem,
    anti-aliased downsampling by a fixed blur depthwise conv, leaky ReLU, SE), StarNet-S1 (ReLU6(f1(x)) * f2(x)
    star products), Sequencer2D-S (bidirectional LSTMs along the rows and the columns instead of attention),
    DaViT-tiny (window attention alternating with channel-group attention, conv position encodings), Visformer-tiny
    (a conv stem and stages, BatchNorm before attention), NesT-tiny (local attention in image blocks, aggregated by
    conv + max pool between levels). Hugging Face models from their config classes, small sizes, VOCAB tokens:
    hf_electra (ElectraModel: 64-wide embeddings projected to 128, 2 layers), hf_mobilebert (MobileBertModel:
    trigram input embeddings by shifted Concat, bottlenecks of 32 in a 128-wide body, NoNorm (an elementwise scale
    and shift), 2 stacked FFNs per layer, the pooler), hf_distilbert (DistilBertForSequenceClassification: 2
    layers, a pre-classifier Linear + ReLU on the first token, 2 labels), hf_beit (BeitForImageClassification: 8 x
    8 patches of a 64 x 64 image, relative position bias per layer, LayerScale, mean pooling), hf_yolos
    (YolosForObjectDetection: a ViT with 10 detection tokens, MLP box and class heads, sigmoid boxes), hf_bloom
    (BloomForCausalLM: ALiBi position biases built from the attention mask's cumulative sum, embedding LayerNorm),
    hf_opt (OPTForCausalLM: learned positions offset by 2 from the mask's cumulative sum, 64-wide embeddings
    projected in and out), hf_phi (PhiForCausalLM: rotary embeddings on half of each head, attention and MLP in
    parallel from one LayerNorm, GELU-tanh, an LM head with bias; an all-ones mask as _heldout8_net's).
    yolo_tiny: a YOLOv5-style detector written by hand on a 128 x 128 image (Conv-BN-SiLU, C3 blocks that split
    and Concat, SPPF's three chained 5 x 5 max pools, an FPN + PAN neck by nearest Upsample and strided convs, three
    anchor heads whose sigmoid outputs are decoded against constant grids and anchors into 1008 boxes (xywh) and
    their class scores (objectness x class))."""
    import torch
    from torch import nn

    model, kwargs, shape = HELDOUT10[name]
    if model == "user":
        def conv(ci: int, co: int, k: int = 1, s: int = 1) -> Any:
            return nn.Sequential(nn.Conv2d(ci, co, k, s, (k - 1) // 2, bias=False), nn.BatchNorm2d(co), nn.SiLU())

        class Bottleneck(nn.Module):
            def __init__(self, c: int, shortcut: bool) -> None:
                super().__init__()
                self.cv1, self.cv2, self.add = conv(c, c, 1), conv(c, c, 3), shortcut

            def forward(self, x: Any) -> Any:
                y = self.cv2(self.cv1(x))
                return x + y if self.add else y

        class C3(nn.Module):
            def __init__(self, ci: int, co: int, n: int = 1, shortcut: bool = True) -> None:
                super().__init__()
                h = co // 2
                self.cv1, self.cv2, self.cv3 = conv(ci, h), conv(ci, h), conv(2 * h, co)
                self.m = nn.Sequential(*(Bottleneck(h, shortcut) for _ in range(n)))

            def forward(self, x: Any) -> Any:
                return self.cv3(torch.cat((self.m(self.cv1(x)), self.cv2(x)), 1))

        class SPPF(nn.Module):
            def __init__(self, ci: int, co: int) -> None:
                super().__init__()
                self.cv1, self.cv2 = conv(ci, ci // 2), conv(ci * 2, co)
                self.m = nn.MaxPool2d(5, 1, 2)

            def forward(self, x: Any) -> Any:
                x = self.cv1(x)
                y1 = self.m(x)
                y2 = self.m(y1)
                return self.cv2(torch.cat((x, y1, y2, self.m(y2)), 1))

        class Yolo(nn.Module):
            def __init__(self, nc: int = 8, side: int = 128) -> None:
                super().__init__()
                self.nc, self.na = nc, 3
                self.stem = conv(3, 16, 6, 2)
                self.b1 = nn.Sequential(conv(16, 32, 3, 2), C3(32, 32))                     # stride 4
                self.b2 = nn.Sequential(conv(32, 64, 3, 2), C3(64, 64, 2))                  # stride 8: P3
                self.b3 = nn.Sequential(conv(64, 128, 3, 2), C3(128, 128, 2))               # stride 16: P4
                self.b4 = nn.Sequential(conv(128, 256, 3, 2), C3(256, 256), SPPF(256, 256))  # stride 32: P5
                self.lat5, self.up = conv(256, 128), nn.Upsample(scale_factor=2, mode="nearest")
                self.c4 = C3(256, 128, shortcut=False)
                self.lat4 = conv(128, 64)
                self.c3 = C3(128, 64, shortcut=False)
                self.down3, self.n4 = conv(64, 64, 3, 2), C3(128, 128, shortcut=False)
                self.down4, self.n5 = conv(128, 128, 3, 2), C3(256, 256, shortcut=False)
                self.heads = nn.ModuleList(nn.Conv2d(c, self.na * (5 + nc), 1) for c in (64, 128, 256))
                anchors = torch.tensor([[10, 13, 16, 30, 33, 23], [30, 61, 62, 45, 59, 119],
                                        [116, 90, 156, 198, 373, 326]], dtype=torch.float32).view(3, 3, 2) / 4
                for i, stride in enumerate((8, 16, 32)):
                    n = side // stride
                    yv, xv = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
                    self.register_buffer(f"grid{i}", torch.stack((xv, yv), -1).view(1, 1, n, n, 2).float() - 0.5)
                    self.register_buffer(f"anchor{i}", anchors[i].view(1, 3, 1, 1, 2))
                self.strides = (8, 16, 32)

            def forward(self, x: Any) -> Any:
                p3 = self.b2(self.b1(self.stem(x)))
                p4 = self.b3(p3)
                p5 = self.b4(p4)
                h5 = self.lat5(p5)
                h4 = self.lat4(self.c4(torch.cat((self.up(h5), p4), 1)))
                o3 = self.c3(torch.cat((self.up(h4), p3), 1))
                o4 = self.n4(torch.cat((self.down3(o3), h4), 1))
                o5 = self.n5(torch.cat((self.down4(o4), h5), 1))
                boxes, scores = [], []
                for i, o in enumerate((o3, o4, o5)):
                    b, _, ny, nx = o.shape
                    y = self.heads[i](o).view(b, self.na, 5 + self.nc, ny, nx).permute(0, 1, 3, 4, 2).sigmoid()
                    xy = (y[..., 0:2] * 2 + getattr(self, f"grid{i}")) * self.strides[i]
                    wh = (y[..., 2:4] * 2) ** 2 * getattr(self, f"anchor{i}")
                    boxes.append(torch.cat((xy, wh), -1).reshape(b, -1, 4))
                    scores.append((y[..., 5:] * y[..., 4:5]).reshape(b, -1, self.nc))
                return torch.cat(boxes, 1), torch.cat(scores, 1)

        return Yolo(side=shape[-1])
    if model != "hf":
        import timm

        return timm.create_model(model, pretrained=False, **kwargs)
    import transformers as tf

    small = {"vocab_size": VOCAB, "hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
             "intermediate_size": 512, "max_position_embeddings": 128}
    vision = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 256,
              "patch_size": 8}
    if name == "hf_electra":
        net = tf.ElectraModel(tf.ElectraConfig(embedding_size=64, **small))
    elif name == "hf_mobilebert":
        net = tf.MobileBertModel(tf.MobileBertConfig(**{**small, "intermediate_size": 128}, embedding_size=32,
                                                     intra_bottleneck_size=32, true_hidden_size=32,
                                                     num_feedforward_networks=2, normalization_type="no_norm"))
    elif name == "hf_distilbert":
        net = tf.DistilBertForSequenceClassification(tf.DistilBertConfig(
            vocab_size=VOCAB, dim=128, n_layers=2, n_heads=4, hidden_dim=512, max_position_embeddings=128,
            num_labels=2))
    elif name == "hf_beit":
        net = tf.BeitForImageClassification(tf.BeitConfig(
            image_size=64, use_relative_position_bias=True, use_mean_pooling=True, layer_scale_init_value=0.1,
            num_labels=10, **vision))
    elif name == "hf_yolos":
        net = tf.YolosForObjectDetection(tf.YolosConfig(image_size=[64, 64], num_detection_tokens=10, num_labels=5,
                                                        **vision))
    elif name == "hf_bloom":
        net = tf.BloomForCausalLM(tf.BloomConfig(vocab_size=VOCAB, hidden_size=128, n_layer=2, n_head=4,
                                                 use_cache=False))
    elif name == "hf_opt":
        net = tf.OPTForCausalLM(tf.OPTConfig(vocab_size=VOCAB, hidden_size=128, num_hidden_layers=2, ffn_dim=512,
                                             num_attention_heads=4, max_position_embeddings=128,
                                             word_embed_proj_dim=64, use_cache=False))
    elif name == "hf_phi":
        net = tf.PhiForCausalLM(tf.PhiConfig(**small, partial_rotary_factor=0.5, use_cache=False))
    else:
        raise ValueError(f"{name} is not one of {' '.join(HELDOUT10)}")
    names = [n for n, _, _ in _inputs(name, shape)]
    outputs = OUTPUT_NAMES[name]

    class Outputs(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = net

        def forward(self, *args: Any) -> Any:
            kw = dict(zip(names, args))
            if name in ("hf_bloom", "hf_opt", "hf_phi"):
                kw["use_cache"] = False
            if name == "hf_phi":  # an all-ones mask, as a tokenizer returns it (see _heldout8_net)
                kw["attention_mask"] = torch.ones_like(args[0])
            got = self.net(**kw, return_dict=True)
            return tuple(got[k] for k in outputs)

    return Outputs()


def random_feeds(inputs: list[tuple[str, tuple[int, ...], bool]], rng: Any) -> dict[str, np.ndarray]:
    """One random input per (name, shape, integer?): floats standard normal; integer inputs token ids below VOCAB,
    except an `attention_mask`: ones, then a random run of padding zeros (up to half the sequence) at the end."""
    feeds = {}
    for name, shape, integer in inputs:
        if not integer:
            feeds[name] = rng.standard_normal(shape).astype(np.float32)
        elif name == "attention_mask":
            mask = np.ones(shape, np.int64)
            mask[..., shape[-1] - int(rng.integers(0, shape[-1] // 2 + 1)):] = 0
            feeds[name] = mask
        else:
            feeds[name] = rng.integers(0, VOCAB, shape).astype(np.int64)
    return feeds


def _import_torchvision() -> Any:
    """torchvision, also where its C++ operators (detection's nms, roi_align) do not load, e.g. a CUDA build of
    torchvision beside a CPU build of torch: the classification models need none of them, but torchvision's
    import registers fake kernels for them and fails; that registration module is then left out."""
    import ctypes
    import importlib.util
    import types

    import torch  # noqa: F401 - loads libtorch before the extension is tried

    spec = importlib.util.find_spec("torchvision")
    ext = [p for p in (Path(spec.origin).parent.glob("_C*.so") if spec and spec.origin else [])]
    try:
        for p in ext:
            ctypes.CDLL(str(p))
    except OSError as exc:
        print(f"torchvision's operators do not load ({exc}); importing its models without them", file=sys.stderr)
        sys.modules.setdefault("torchvision._meta_registrations", types.ModuleType("torchvision._meta_registrations"))
    import torchvision

    return torchvision


def _net(name: str) -> tuple[Any, tuple[int, ...]]:
    import torch

    if name in TRANSFORMERS:
        return _transformer(name), (1, SEQ, WIDTH)
    if name in HELDOUT6:  # transformers, not torchvision (the bench-only Python that has it may lack torchvision)
        net, shape = _hf_net(name), HELDOUT6[name]
    elif name in HELDOUT8:
        net, shape = _heldout8_net(name), HELDOUT8[name][2]
    elif name in HELDOUT9:
        net, shape = _heldout9_net(name), HELDOUT9[name][2]
    elif name in HELDOUT10:
        net, shape = _heldout10_net(name), HELDOUT10[name][2]
    elif name in USER_NETS:
        net, shape = _user_net(name), USER_NETS[name]
    elif name in TORCHVISION_OTHER:
        torchvision = _import_torchvision()
        kind, shape = TORCHVISION_OTHER[name]
        kw = {"weights_backbone": None, "aux_loss": None} if kind == "segmentation" else {}
        net = torchvision.models.get_model(name, weights=None, **kw)
        if kind == "segmentation":
            net = _out_map(net)
    elif name not in (torchvision := _import_torchvision()).models.list_models(module=torchvision.models):
        raise ValueError(f"{name} is not a torchvision classification model (nor one of "
                         f"{' '.join([*USER_NETS, *TORCHVISION_OTHER, *HELDOUT6, *HELDOUT8, *HELDOUT9, *HELDOUT10])})")
    else:
        kwargs = {"aux_logits": False, "init_weights": True} if name in NO_AUX else {}
        net = torchvision.models.get_model(name, weights=None, **kwargs)
        side = INPUT_SIZE.get(name, 224)
        shape = (1, 3, side, side)
    norms = [m for m in net.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    for m in norms:
        m.momentum = None  # cumulative average over the passes below
    net.train()
    with torch.no_grad():
        for _ in range(BN_PASSES if norms else 0):
            net(*(torch.randn(2, *s[1:]) for _, s, _ in _inputs(name, shape)))
    return net, shape


def _inputs(name: str, shape: tuple[int, ...]) -> list[tuple[str, tuple[int, ...], bool]]:
    """The model's inputs as random_feeds takes them: one float `input`, or TOKEN_INPUTS' integer inputs."""
    if name in FLOAT_INPUTS:  # each at the batch of `shape` (a variant's); a single input at `shape` itself
        if len(FLOAT_INPUTS[name]) == 1:
            return [(FLOAT_INPUTS[name][0][0], shape, False)]
        return [(n, (shape[0], *s[1:]), False) for n, s in FLOAT_INPUTS[name]]
    return [(n, shape, True) for n in TOKEN_INPUTS[name]] if name in TOKEN_INPUTS else [("input", shape, False)]


def _shared_initializers(model: Any) -> list[Any]:
    """The `Identity(initializer)` nodes of a model: torch's exporter stores identical parameters once (the
    seeded initialisation's all-zero conv biases of SqueezeNet, MobileNetV3's and EfficientNet's
    squeeze-excitation convs) and gives the other users an Identity of it."""
    inits = {t.name for t in model.graph.initializer}
    return [n for n in model.graph.node if n.op_type == "Identity" and n.input[0] in inits]


def _unshare_initializers(model: Any) -> Any:
    """The same model with each `Identity(initializer)` replaced by a copy of the initializer under the Identity's
    output name.  For onnxruntime's QOperator quantizer only: it reads a Conv's bias as an initializer and fails
    on one computed by a node (onnx_quantizer.quantize_bias_static: `find_by_name` gives None, then
    `'NoneType' object has no attribute 'data_type'`; its QDQ quantizer quantizes the same graph).  Nothing is
    computed differently: the calibration sees the same activations, so the scales match the QDQ export's."""
    from onnx import numpy_helper

    inits = {t.name: t for t in model.graph.initializer}
    for node in _shared_initializers(model):
        copy = numpy_helper.from_array(numpy_helper.to_array(inits[node.input[0]]), node.output[0])
        model.graph.initializer.append(copy)
        model.graph.node.remove(node)
    return model


def _wrapped(net: Any, forward: Any) -> Any:
    """`net` inside a torch module whose forward is `forward(net, x)` (torch.onnx exports modules)."""
    import torch

    class Wrapped(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = net

        def forward(self, x: Any) -> Any:
            return forward(self.net, x)

    return Wrapped()


def _out_map(net: Any) -> Any:
    """A torchvision segmentation net returning its "out" map (it returns a dict of maps)."""
    return _wrapped(net, lambda net, x: net(x)["out"])


def _end_products(model: Any) -> list[str]:
    """The names of a float graph's first and last matrix products (Conv, Gemm, MatMul): the layers a user most
    often keeps in float (`nodes_to_exclude`), the stem and the classifier being the most sensitive to rounding."""
    products = [n.name for n in model.graph.node if n.op_type in ("Conv", "Gemm", "MatMul")]
    return [products[0], products[-1]] if products else []


def _qat_net(net: Any, feeds: list[dict[str, np.ndarray]]) -> Any:
    """`net` (eval mode) as a QAT flow leaves it for export: BatchNorm folded into the preceding convs
    (torch.fx's fuse), every Conv2d / Linear wrapped so that its input is fake-quantized per tensor (int8,
    asymmetric, moving-average min / max) and its weight per output channel (int8, symmetric), the observers
    run on `feeds`, then frozen."""
    import torch
    from torch.ao.quantization import FakeQuantize, MovingAverageMinMaxObserver, MovingAveragePerChannelMinMaxObserver
    from torch.fx.experimental.optimization import fuse

    class FakeQuantized(torch.nn.Module):
        def __init__(self, m: Any) -> None:
            super().__init__()
            self.m = m
            self.act = FakeQuantize(observer=MovingAverageMinMaxObserver, quant_min=-128, quant_max=127,
                                    dtype=torch.qint8, qscheme=torch.per_tensor_affine)
            self.wq = FakeQuantize(observer=MovingAveragePerChannelMinMaxObserver, quant_min=-128, quant_max=127,
                                   dtype=torch.qint8, qscheme=torch.per_channel_symmetric, ch_axis=0)

        def forward(self, x: Any) -> Any:
            w = self.wq(self.m.weight)
            if isinstance(self.m, torch.nn.Linear):
                return torch.nn.functional.linear(self.act(x), w, self.m.bias)
            return self.m._conv_forward(self.act(x), w, self.m.bias)

    net = fuse(net)
    for mod in list(net.modules()):
        for child_name, child in list(mod.named_children()):
            if isinstance(child, (torch.nn.Conv2d, torch.nn.Linear)):
                setattr(mod, child_name, FakeQuantized(child))
    with torch.no_grad():
        for f in feeds:
            net(torch.from_numpy(f["input"]))
    for m in net.modules():
        if isinstance(m, FakeQuantize):
            m.disable_observer()
    return net


def _nhwc(net: Any) -> Any:
    """A wrapper taking channels-last images (N, H, W, C), as a TensorFlow-style pipeline feeds them."""
    return _wrapped(net, lambda net, x: net(x.permute(0, 3, 1, 2)))


def export(name: str, out: Path, seed: int = 0, variant: str = "") -> dict[str, Path]:
    import onnx
    import torch
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quant_pre_process,
        quantize_dynamic,
        quantize_static,
    )

    v = VARIANTS[variant] if variant else {}
    stem = f"{name}@{variant}" if variant else name
    fmts = ("float", "dynamic") if v.get("dynamic") else ("float", *v.get("formats", ("qdq", "qoperator")))
    paths = {f: out / f"{stem}.{f}.onnx" for f in fmts}
    if all(p.exists() for p in paths.values()):
        return paths
    torch.manual_seed(seed)
    net, shape = _net(name)
    net.eval()
    if v.get("side") and len(shape) == 4:
        shape = (*shape[:2], v["side"], v["side"])
    if v.get("batch"):
        shape = (v["batch"], *shape[1:])
    if v.get("nhwc") and len(shape) == 4:
        net, shape = _nhwc(net), (shape[0], shape[2], shape[3], shape[1])
    out.mkdir(parents=True, exist_ok=True)
    if not paths["float"].exists():
        kwargs: dict[str, Any] = {"opset_version": OPSET.get(name, 17), "dynamo": False, **v.get("export", {})}
        if v.get("dynamic_batch"):
            kwargs["dynamic_axes"] = {"input": {0: "batch"}, "output": {0: "batch"}}
        # with gradients on: PyTorch's fused attention fast path (eval + no_grad) has no ONNX export
        example = random_feeds(_inputs(name, shape), np.random.default_rng(seed))
        torch.onnx.export(net, tuple(torch.from_numpy(x) for x in example.values()), str(paths["float"]),
                          input_names=list(example), output_names=list(OUTPUT_NAMES.get(name, ["output"])), **kwargs)
        onnx.checker.check_model(str(paths["float"]))
    if v.get("dynamic"):
        if not paths["dynamic"].exists():
            quantize_dynamic(str(paths["float"]), str(paths["dynamic"]))
        return paths
    rng = np.random.default_rng(seed)
    feeds = [random_feeds(_inputs(name, shape), rng) for _ in range(CALIBRATION)]
    if v.get("qat"):
        if not paths["qdq"].exists():
            tmp_out = paths["qdq"].with_suffix(".tmp")
            torch.onnx.export(_qat_net(net, feeds), (torch.randn(*shape),), str(tmp_out), input_names=["input"],
                              output_names=["output"], opset_version=17, dynamo=False)
            tmp_out.replace(paths["qdq"])
        return paths

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self._it = iter(feeds)

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self._it, None)

    q = {"activation_type": "QInt8", "weight_type": "QInt8", "per_channel": False, **v.get("quant", {})}
    extra = q.pop("extra", {})
    q["activation_type"], q["weight_type"] = QuantType[q["activation_type"]], QuantType[q["weight_type"]]
    if "calibrate" in q:
        q["calibrate_method"] = CalibrationMethod[q.pop("calibrate")]
    if q.pop("exclude", None) == "ends":
        q["nodes_to_exclude"] = _end_products(onnx.load(str(paths["float"])))
    for fmt, qf in (("qdq", QuantFormat.QDQ), ("qoperator", QuantFormat.QOperator)):
        if fmt not in paths or paths[fmt].exists():
            continue
        with tempfile.TemporaryDirectory() as tmp:
            dst = Path(tmp) / "quant.onnx"
            src = paths["float"]
            if "preprocess" in v:
                src = Path(tmp) / "float-preprocessed.onnx"
                quant_pre_process(str(paths["float"]), str(src), **v["preprocess"])
            if fmt == "qoperator" and _shared_initializers(onnx.load(str(src))):
                unshared = Path(tmp) / "float-unshared.onnx"
                onnx.save(_unshare_initializers(onnx.load(str(src))), str(unshared))
                src = unshared
            quantize_static(str(src), str(dst), Reader(), quant_format=qf, extra_options=extra, **q)
            if v.get("convert"):
                from onnx import version_converter

                onnx.save(version_converter.convert_version(onnx.load(str(dst)), v["convert"]), str(dst))
            tmp_out = paths[fmt].with_suffix(".tmp")
            tmp_out.write_bytes(dst.read_bytes())
            tmp_out.replace(paths[fmt])
    return paths


def main() -> None:
    import logging

    logging.getLogger().setLevel(logging.ERROR)  # the quantizer's "consider pre-processing" advice
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="+", help=f"model names: {' '.join(VISION + TRANSFORMERS)} (or see --any)")
    ap.add_argument("--any", action="store_true",
                    help="also any torchvision classification model by name, or one of "
                         f"{' '.join([*USER_NETS, *TORCHVISION_OTHER, *HELDOUT6, *HELDOUT8, *HELDOUT9, *HELDOUT10])}")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--variant", default="", help=f"comma-separated, other exports: {' '.join(VARIANTS)}")
    args = ap.parse_args()
    variants = [x for x in args.variant.split(",") if x] or [""]
    if bad := [x for x in variants if x and x not in VARIANTS]:
        ap.error(f"unknown variant(s): {' '.join(bad)}")
    if not args.any and (bad := [m for m in args.models if m not in VISION + TRANSFORMERS]):
        ap.error(f"not in the zoo: {' '.join(bad)} (--any exports any torchvision classification model)")
    for name, variant in ((n, x) for n in args.models for x in variants):
        label = f"{name}@{variant}" if variant else name
        try:
            paths = export(name, args.out, args.seed, variant)
            print(label, *paths.values(), flush=True)
        except Exception as exc:  # noqa: BLE001 - reported per model, the others still export
            traceback.print_exc(file=sys.stderr)
            print(label, "FAILED", f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
                  flush=True)


if __name__ == "__main__":
    main()
