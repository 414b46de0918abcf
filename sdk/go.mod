module github.com/guardhq/guard/sdk

go 1.24
