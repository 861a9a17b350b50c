"""FlagScale: its plugin trees and its megatron.plugin.decorators."""
