#!/bin/bash
# Llama-3 70B pretraining with Megatron-LM on 16 nodes of 8 H100 (128 GPUs): TP8 x PP4 (interleaved,
# 4 virtual stages of 5 layers per rank) x DP4, distributed optimizer, selective recompute.
# Written for parasim's tests from Megatron-LM's argument names (megatron/training/arguments.py) and the
# shape of its examples/llama/train_llama3_8b_h100_fp8.sh; the model sizes are Meta-Llama-3-70B's.

GPUS_PER_NODE=8
NUM_NODES=16
TP=8
PP=4

torchrun --nproc_per_node $GPUS_PER_NODE --nnodes ${NUM_NODES} --node_rank 0 \
    --master_addr localhost --master_port 29500 \
    pretrain_gpt.py \
    --use-mcore-models \
    --tensor-model-parallel-size ${TP} \
    --pipeline-model-parallel-size ${PP} \
    --num-layers-per-virtual-pipeline-stage 5 \
    --sequence-parallel \
    --use-distributed-optimizer \
    --overlap-grad-reduce \
    --overlap-param-gather \
    --num-layers 80 \
    --hidden-size 8192 \
    --ffn-hidden-size 28672 \
    --num-attention-heads 64 \
    --group-query-attention \
    --num-query-groups 8 \
    --seq-length 8192 \
    --max-position-embeddings 8192 \
    --position-embedding-type rope \
    --rotary-base 500000 \
    --swiglu \
    --normalization RMSNorm \
    --disable-bias-linear \
    --untie-embeddings-and-output-weights \
    --attention-dropout 0.0 \
    --hidden-dropout 0.0 \
    --micro-batch-size 1 \
    --global-batch-size 1024 \
    --train-iters 500000 \
    --lr 1.5e-4 --min-lr 1.5e-5 --lr-decay-style cosine --lr-warmup-iters 2000 \
    --weight-decay 0.1 --adam-beta1 0.9 --adam-beta2 0.95 --clip-grad 1.0 \
    --init-method-std 0.008 \
    --bf16 \
    --recompute-granularity selective \
    --attention-backend fused \
    --tokenizer-type HuggingFaceTokenizer \
    --tokenizer-model meta-llama/Meta-Llama-3-70B \
    --data-path 0.5 /data/corpus_a_text_document 0.5 /data/corpus_b_text_document \
    --split 99,1,0 \
    --log-interval 10 --eval-interval 1000 --eval-iters 10 \
    --save /checkpoints/llama3-70b --load /checkpoints/llama3-70b --save-interval 1000 \
    --ckpt-format torch_dist \
    --tensorboard-dir /logs/llama3-70b \
    --use-flash-attn-v7-experimental
