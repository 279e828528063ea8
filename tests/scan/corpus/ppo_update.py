"""PPO on a vectorised gym environment: rollouts without gradients, then clipped policy updates."""

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
from torch.distributions import Categorical


class ActorCritic(nn.Module):
    def __init__(self, obs_dim, n_actions, hidden=64):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(obs_dim, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh())
        self.pi = nn.Linear(hidden, n_actions)
        self.v = nn.Linear(hidden, 1)

    def forward(self, obs):
        h = self.body(obs)
        return Categorical(logits=self.pi(h)), self.v(h).squeeze(-1)


def gae(rewards, values, dones, gamma=0.99, lam=0.95):
    adv = torch.zeros_like(rewards)
    last = 0.0
    for t in reversed(range(len(rewards))):
        nonterminal = 1.0 - dones[t]
        next_value = values[t + 1] if t + 1 < len(values) else 0.0
        delta = rewards[t] + gamma * next_value * nonterminal - values[t]
        last = delta + gamma * lam * nonterminal * last
        adv[t] = last
    return adv


def main(total_steps=1_000_000, n_envs=8, horizon=128, epochs=4, target_kl=0.02):
    device = torch.accelerator.current_accelerator() or torch.device("cpu")
    envs = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(n_envs)])
    agent = ActorCritic(envs.single_observation_space.shape[0], envs.single_action_space.n).to(device)
    opt = torch.optim.Adam(agent.parameters(), lr=2.5e-4, eps=1e-5)
    obs, _ = envs.reset(seed=0)
    for update in range(total_steps // (n_envs * horizon)):
        buf = {k: [] for k in ("obs", "act", "logp", "rew", "done", "val")}
        with torch.no_grad():
            for _ in range(horizon):
                o = torch.as_tensor(obs, dtype=torch.float32, device=device)
                dist, value = agent(o)
                action = dist.sample()
                obs, reward, term, trunc, _ = envs.step(action.cpu().numpy())
                for k, v in zip(buf, (o, action, dist.log_prob(action), torch.as_tensor(reward, device=device),
                                      torch.as_tensor(np.logical_or(term, trunc), device=device).float(), value)):
                    buf[k].append(v)
        data = {k: torch.stack(v) for k, v in buf.items()}
        adv = gae(data["rew"], data["val"], data["done"])
        returns = adv + data["val"]
        for epoch in range(epochs):
            dist, value = agent(data["obs"])
            logp = dist.log_prob(data["act"])
            ratio = (logp - data["logp"]).exp()
            norm_adv = (adv - adv.mean()) / (adv.std() + 1e-8)
            policy_loss = -torch.min(ratio * norm_adv, ratio.clamp(0.8, 1.2) * norm_adv).mean()
            value_loss = (returns - value).pow(2).mean()
            loss = policy_loss + 0.5 * value_loss - 0.01 * dist.entropy().mean()
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(agent.parameters(), 0.5)
            opt.step()
            approx_kl = (data["logp"] - logp).mean()
            if approx_kl > 1.5 * target_kl:
                break
        if update % 10 == 0:
            print(f"update {update}: return {data['rew'].sum(0).mean().item():.1f} kl {approx_kl.item():.4f}")
    torch.save(agent, "ppo_agent.pt")


if __name__ == "__main__":
    main()
