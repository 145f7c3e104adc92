package main

/*
#include <infiniband/verbs.h>

// The rate conversions of rdma-core's libibverbs (verbs.c): pure functions
// of enum ibv_rate, with its tables (a multiple of 2.5 Gb/s; the signalling
// rate in Mb/s, FDR and EDR's with their encodings), -1 or IBV_RATE_MAX for
// what has none. They were generated stubs returning EOPNOTSUPP (95), a
// multiplier or a rate no caller could tell from a real one.
static const struct {
	enum ibv_rate rate;
	int mult, mbps;
} sr_rates[] = {
	{IBV_RATE_2_5_GBPS, 1, 2500},	  {IBV_RATE_5_GBPS, 2, 5000},	    {IBV_RATE_10_GBPS, 4, 10000},
	{IBV_RATE_20_GBPS, 8, 20000},	  {IBV_RATE_30_GBPS, 12, 30000},    {IBV_RATE_40_GBPS, 16, 40000},
	{IBV_RATE_60_GBPS, 24, 60000},	  {IBV_RATE_80_GBPS, 32, 80000},    {IBV_RATE_120_GBPS, 48, 120000},
	{IBV_RATE_14_GBPS, -1, 14062},	  {IBV_RATE_56_GBPS, -1, 56250},    {IBV_RATE_112_GBPS, -1, 112500},
	{IBV_RATE_168_GBPS, -1, 168750},  {IBV_RATE_25_GBPS, -1, 25781},    {IBV_RATE_100_GBPS, -1, 103125},
	{IBV_RATE_200_GBPS, -1, 206250},  {IBV_RATE_300_GBPS, -1, 309375},  {IBV_RATE_28_GBPS, 11, 28125},
	{IBV_RATE_50_GBPS, 20, 53125},	  {IBV_RATE_400_GBPS, 160, 425000}, {IBV_RATE_600_GBPS, 240, 637500},
	{IBV_RATE_800_GBPS, 320, 850000}, {IBV_RATE_1200_GBPS, 480, 1275000},
};
#define SR_NRATES (sizeof(sr_rates) / sizeof(sr_rates[0]))

int ibv_rate_to_mult(enum ibv_rate rate)
{
	for (unsigned i = 0; i < SR_NRATES; i++)
		if (sr_rates[i].rate == rate)
			return sr_rates[i].mult;
	return -1;
}

enum ibv_rate mult_to_ibv_rate(int mult)
{
	for (unsigned i = 0; i < SR_NRATES; i++)
		if (sr_rates[i].mult == mult && mult > 0)
			return sr_rates[i].rate;
	return IBV_RATE_MAX;
}

int ibv_rate_to_mbps(enum ibv_rate rate)
{
	for (unsigned i = 0; i < SR_NRATES; i++)
		if (sr_rates[i].rate == rate)
			return sr_rates[i].mbps;
	return -1;
}

enum ibv_rate mbps_to_ibv_rate(int mbps)
{
	for (unsigned i = 0; i < SR_NRATES; i++)
		if (sr_rates[i].mbps == mbps)
			return sr_rates[i].rate;
	return IBV_RATE_MAX;
}
*/
import "C"
