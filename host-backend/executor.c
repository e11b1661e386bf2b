/*
 * executor.c - the executors pvgpud can run sessions on, by name.
 */
#include <string.h>

#include "executor.h"

static const struct pvgpu_executor_ops *const executors[] = {
	&pvgpu_exec_cuda,
	&pvgpu_exec_sim,
};

const struct pvgpu_executor_ops *pvgpu_executor_find(const char *name)
{
	size_t i;

	if (!name)
		return NULL;
	for (i = 0; i < sizeof(executors) / sizeof(executors[0]); i++)
		if (!strcmp(executors[i]->name, name))
			return executors[i];
	return NULL;
}
